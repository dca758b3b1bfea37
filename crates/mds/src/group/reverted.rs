//! A member restarted on data older than what it acknowledged — its
//! directory restored from a backup or a copy, or a disk that lost
//! flushed writes — has forgotten entries the group may have counted it
//! for, and its vote. Raft assumes this never happens: such a member
//! could help elect a leader without committed entries, or vote twice in
//! one term. So before raft starts, a member asks every other member
//! what it last saw it hold: a leader answers with the highest index it
//! knows this member acknowledged. If that lies past the end of the
//! member's own log, the member refuses to start and says how to replace
//! it (`tessera mds remove`, then `join`).
//!
//! Only a leader that has replicated to the member since it took over
//! knows; when none answers (the whole group restarting, the leader
//! changed while the member was down), the check cannot tell, and says so
//! in the log.

use std::time::Duration;

use openraft::network::RaftNetworkFactory;

use super::peer::PeerNet;
pub use super::peer::Seen;
use crate::raft::Member;

/// How long a restarting member waits for each other member's answer.
const ASK_WAIT: Duration = Duration::from_secs(2);

/// Whether an answer shows the member's data went back: a leader at
/// least as recent as the member's own vote saw it hold an index past
/// its log's end (a leader of an older term may have been deposed, and
/// its entries rightly cut from this member's log since).
pub fn went_back(seen: Seen, vote_term: u64, last_index: u64) -> bool {
    seen.term >= vote_term && seen.index > last_index
}

/// Asks `peers` (id, peer address) what they saw member `me` hold, and
/// refuses when one shows its data went back.
pub async fn refuse_if_reverted(
    net: &PeerNet,
    me: u64,
    vote_term: u64,
    last_index: u64,
    peers: Vec<(u64, String)>,
) -> Result<(), String> {
    let mut asks = Vec::new();
    for (id, addr) in peers.into_iter().filter(|(id, _)| *id != me) {
        let mut net = net.clone();
        asks.push(tokio::spawn(async move {
            let node = Member {
                addr,
                client: String::new(),
            };
            let mut link = net.new_client(id, &node).await;
            (id, link.progress(ASK_WAIT).await)
        }));
    }
    let mut checked = false;
    for a in asks {
        let Ok((id, answer)) = a.await else { continue };
        match answer {
            Ok(Some(seen)) if went_back(seen, vote_term, last_index) => {
                return Err(format!(
                    "this member's data is older than what it acknowledged: leader {id} (term \
                     {}) saw it hold log index {}, and its log ends at {last_index}. It was \
                     restored from a copy or its disk lost writes, and must not take part: \
                     remove it (`tessera mds remove --id {me}`) and make a new member \
                     (`tessera mds join`)",
                    seen.term, seen.index
                ));
            }
            Ok(Some(_)) => checked = true,
            Ok(None) => {}
            Err(e) => tracing::debug!(member = id, error = %e, "not asked"),
        }
    }
    if !checked {
        tracing::info!("no leader knew what this member held: it starts without that check");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Seen, went_back};

    #[test]
    fn only_a_recent_leader_that_saw_more_means_the_data_went_back() {
        let seen = |term, index| Seen { term, index };
        assert!(went_back(seen(5, 100), 5, 60), "acknowledged 100, holds 60");
        assert!(went_back(seen(6, 100), 5, 99));
        assert!(
            !went_back(seen(5, 100), 5, 100),
            "holds what it acknowledged"
        );
        assert!(
            !went_back(seen(5, 80), 5, 100),
            "holds more (not yet acknowledged)"
        );
        assert!(
            !went_back(seen(4, 100), 5, 60),
            "a deposed leader's entries may rightly have been cut"
        );
    }
}
