//! Property tests of both allocators against a trivial model (one bool per
//! block): never hand out a block twice, free space is exactly the complement
//! of what is owned, free extents are maximal, large blocks are aligned.

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        blocks: u64,
        goal: Option<u64>,
        large: bool,
    },
    Free {
        pick: usize,
    },
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        3 => (1u64..40, proptest::option::of(0u64..512), any::<bool>())
            .prop_map(|(blocks, goal, large)| Op::Alloc { blocks, goal, large }),
        2 => any::<usize>().prop_map(|pick| Op::Free { pick }),
    ];
    proptest::collection::vec(op, 1..200)
}

const TOTAL: u64 = 500; // deliberately not a multiple of the region size
const REGION: u64 = 64;
const LARGE: u64 = 8;

fn run(alloc: &mut dyn Allocator, ops: &[Op], region: bool) -> Result<(), TestCaseError> {
    let mut owned_model = vec![false; TOTAL as usize];
    let mut owned: Vec<Vec<Extent>> = Vec::new();
    for op in ops {
        match *op {
            Op::Alloc {
                blocks,
                goal,
                large,
            } => {
                let large = large && region;
                let blocks = if large {
                    blocks.div_ceil(LARGE) * LARGE
                } else {
                    blocks
                };
                let class = if large { Class::Large } else { Class::Small };
                let free_before = alloc.free_blocks();
                match alloc.allocate(&Request {
                    blocks,
                    goal,
                    class,
                    grow: 0,
                }) {
                    Ok(exts) => {
                        prop_assert_eq!(exts.iter().map(|e| e.len).sum::<u64>(), blocks);
                        for e in &exts {
                            prop_assert!(e.end() <= TOTAL);
                            if large {
                                prop_assert_eq!(e.len, LARGE);
                                prop_assert_eq!(e.start % LARGE, 0);
                            }
                            for b in e.start..e.end() {
                                prop_assert!(
                                    !owned_model[b as usize],
                                    "block {} handed out twice",
                                    b
                                );
                                owned_model[b as usize] = true;
                            }
                        }
                        prop_assert_eq!(alloc.free_blocks(), free_before - blocks);
                        owned.push(exts);
                    }
                    Err(AllocError::NoSpace { .. }) => {
                        prop_assert_eq!(alloc.free_blocks(), free_before);
                        if !region {
                            prop_assert!(free_before < blocks, "extent policy refused with room");
                        }
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
                }
            }
            Op::Free { pick } => {
                if owned.is_empty() {
                    continue;
                }
                let exts = owned.swap_remove(pick % owned.len());
                for e in exts {
                    alloc
                        .free(e)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    for b in e.start..e.end() {
                        owned_model[b as usize] = false;
                    }
                }
            }
        }
        alloc
            .check()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let free = alloc.free_extents();
        let mut model_free = vec![false; TOTAL as usize];
        for w in free.windows(2) {
            prop_assert!(w[0].end() < w[1].start, "free extents not maximal: {:?}", w);
        }
        for e in &free {
            for b in e.start..e.end() {
                model_free[b as usize] = true;
            }
        }
        for b in 0..TOTAL as usize {
            prop_assert_eq!(
                model_free[b],
                !owned_model[b],
                "block {} free/used mismatch",
                b
            );
        }
    }
    // Everything freed: back to one whole free run.
    for exts in owned {
        for e in exts {
            alloc
                .free(e)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
    }
    prop_assert_eq!(alloc.free_extents(), vec![Extent::new(0, TOTAL)]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn extent_policy_matches_model(ops in ops()) {
        run(&mut ExtentAllocator::new(TOTAL), &ops, false)?;
    }

    #[test]
    fn extent_policy_coarse_buckets_match_model(ops in ops()) {
        run(&mut ExtentAllocator::with_spacing(TOTAL, 3), &ops, false)?;
    }

    #[test]
    fn region_policy_matches_model(ops in ops()) {
        run(&mut RegionAllocator::new(TOTAL, REGION, LARGE), &ops, true)?;
    }
}

#[test]
fn double_free_and_double_reserve_are_refused() {
    let mut a = ExtentAllocator::new(100);
    let e = a
        .allocate(&Request {
            blocks: 10,
            goal: None,
            class: Class::Small,
            grow: 0,
        })
        .unwrap();
    a.free(e[0]).unwrap();
    assert!(matches!(a.free(e[0]), Err(AllocError::Conflict { .. })));
    a.reserve(Extent::new(5, 5), Class::Small).unwrap();
    assert!(a.reserve(Extent::new(8, 5), Class::Small).is_err());

    let mut r = RegionAllocator::new(128, 64, 8);
    r.reserve(Extent::new(0, 8), Class::Large).unwrap();
    assert!(
        r.reserve(Extent::new(8, 1), Class::Small).is_err(),
        "small block in a large region"
    );
    assert!(r.reserve(Extent::new(0, 8), Class::Large).is_err());
}

#[test]
fn closest_good_fit_prefers_the_goal() {
    let mut a = ExtentAllocator::new(1000);
    // Make holes of 10 blocks at 100, 500 and 900.
    for s in [0u64, 110, 510, 910] {
        let end =
            [100u64, 500, 900, 1000][[0u64, 110, 510, 910].iter().position(|&x| x == s).unwrap()];
        a.reserve(Extent::new(s, end - s), Class::Small).unwrap();
    }
    let got = a
        .allocate(&Request {
            blocks: 5,
            goal: Some(880),
            class: Class::Small,
            grow: 0,
        })
        .unwrap();
    assert_eq!(got, vec![Extent::new(900, 5)]);
    // The 5 blocks left at 905 sit in a smaller bucket than 8 needs; of the
    // 10-block holes, the one near the goal wins, carved at its goal end.
    let got = a
        .allocate(&Request {
            blocks: 8,
            goal: Some(120),
            class: Class::Small,
            grow: 0,
        })
        .unwrap();
    assert_eq!(got, vec![Extent::new(102, 8)]);
}

#[test]
fn small_objects_stay_in_one_region() {
    let mut r = RegionAllocator::new(1024, 128, 16);
    for _ in 0..20 {
        let got = r
            .allocate(&Request {
                blocks: 7,
                goal: None,
                class: Class::Small,
                grow: 0,
            })
            .unwrap();
        let first = got[0].start / 128;
        assert!(
            got.iter()
                .all(|e| e.start / 128 == first && (e.end() - 1) / 128 == first)
        );
    }
}

#[test]
fn an_object_continues_right_after_its_last_extent_when_that_is_free() {
    let mut a = ExtentAllocator::new(10_000);
    // A 20-block hole right at the start would be the tight fit for 16 blocks.
    a.reserve(Extent::new(20, 1000), Class::Small).unwrap();
    let got = a
        .allocate(&Request {
            blocks: 16,
            goal: Some(5000),
            class: Class::Small,
            grow: 0,
        })
        .unwrap();
    assert_eq!(got, vec![Extent::new(5000, 16)]);
}

#[test]
fn a_growing_object_moves_to_an_extent_with_room_and_splits_a_big_one() {
    let mut a = ExtentAllocator::new(100_000);
    // Free: a 40-block hole at 0 (tight for 16), then one big extent from 1000.
    a.reserve(Extent::new(40, 960), Class::Small).unwrap();
    let grow = 64;
    let got = a
        .allocate(&Request {
            blocks: 16,
            goal: Some(41),
            class: Class::Small,
            grow,
        })
        .unwrap();
    let e = got[0];
    assert!(e.start >= 1000, "not the tight hole: {e:?}");
    // The big free extent is split in its middle: room before and after.
    assert_eq!(e.start, 1000 + (99_000 - 16) / 2);
    a.check().unwrap();
}
