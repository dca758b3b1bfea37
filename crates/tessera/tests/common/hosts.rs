//! Several "hosts" on this machine: network namespaces joined by a
//! bridge to the test's own (the several-hosts harness). A host is cut off
//! from everyone by taking its bridge port down, or from one other host
//! by a blackhole route on each side (both still reach the rest).

use std::process::Command;

use super::BIN;

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

/// Namespaces `<tag>m<K>` for members 1..=n, each with a veth pair whose
/// outer end `<tag>p<K>` is a port of bridge `<tag>b` (address .100 here);
/// member K has 10.78.<subnet>.K.
pub struct Hosts {
    tag: String,
    subnet: u8,
    n: usize,
}

impl Hosts {
    pub fn make(n: usize) -> Hosts {
        let pid = std::process::id();
        let h = Hosts {
            tag: format!("ts{:x}", pid & 0xffff),
            subnet: (pid % 200) as u8 + 20,
            n,
        };
        let bridge = h.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", h.addr(100)),
            "dev",
            &bridge,
        ]);
        ip(&["link", "set", &bridge, "up"]);
        for k in 1..=n {
            let ns = h.ns(k);
            let (inner, outer) = (format!("{}v{k}", h.tag), h.port(k));
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            ip(&[
                "link", "add", &inner, "type", "veth", "peer", "name", &outer,
            ]);
            ip(&["link", "set", &inner, "netns", &ns]);
            ip(&["link", "set", &outer, "master", &bridge]);
            ip(&["link", "set", &outer, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", h.addr(k as u8)),
                "dev",
                &inner,
            ]);
            ip(&["-n", &ns, "link", "set", &inner, "up"]);
        }
        h
    }

    pub fn bridge(&self) -> String {
        format!("{}b", self.tag)
    }

    pub fn ns(&self, k: usize) -> String {
        format!("{}m{k}", self.tag)
    }

    pub fn port(&self, k: usize) -> String {
        format!("{}p{k}", self.tag)
    }

    pub fn addr(&self, host: u8) -> String {
        format!("10.78.{}.{host}", self.subnet)
    }

    /// Member K's client address.
    pub fn member(&self, k: usize) -> String {
        format!("{}:7400", self.addr(k as u8))
    }

    pub fn list(&self) -> String {
        (1..=self.n)
            .map(|k| self.member(k))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Cuts member K off from everyone (its bridge port down), or joins
    /// it again.
    pub fn link(&self, k: usize, up: bool) {
        ip(&["link", "set", &self.port(k), if up { "up" } else { "down" }]);
    }

    /// Cuts the link between hosts `a` and `b` (each drops what it would
    /// send the other), or mends it; both keep reaching everyone else.
    pub fn cut(&self, a: usize, b: usize, cut: bool) {
        for (from, to) in [(a, b), (b, a)] {
            let verb = if cut { "add" } else { "del" };
            ip(&[
                "-n",
                &self.ns(from),
                "route",
                verb,
                "blackhole",
                &format!("{}/32", self.addr(to as u8)),
            ]);
        }
    }

    /// The address of this test's end of the bridge (the root namespace).
    pub fn here(&self) -> String {
        self.addr(100)
    }

    /// `tessera ARGS` run on member K's host.
    pub fn on(&self, k: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(k), BIN]);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for k in 1..=self.n {
            // The pair goes with either end; a namespace outlives its name
            // for a while, so its veth is not left to it.
            let _ = Command::new("ip")
                .args(["link", "del", &self.port(k)])
                .status();
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(k)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .status();
    }
}
