//! Connections per client address: one address may hold at most so many of the server's
//! connection slots at once (nginx's `limit_conn` keyed by `$binary_remote_addr`), so clients
//! at one address that never let go cannot keep everyone else out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The connections each address holds.
#[derive(Debug, Clone)]
pub(super) struct Peers {
    cap: usize,
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection of one address, given back when dropped.
#[derive(Debug)]
pub(super) struct PeerSlot {
    peers: Peers,
    address: IpAddr,
}

impl Peers {
    /// At most `cap` connections per address.
    pub(super) fn new(cap: usize) -> Self {
        Self {
            cap,
            held: Arc::default(),
        }
    }

    /// A slot for one more connection of `address`, unless it holds `cap` already. An IPv6
    /// address that maps an IPv4 one counts as that one.
    pub(super) fn try_take(&self, address: IpAddr) -> Option<PeerSlot> {
        let address = address.to_canonical();
        let mut held = self.lock();
        let count = held.entry(address).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            address,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.peers.lock();
        if let Some(count) = held.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.address);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_cap_and_gets_slots_back_as_they_close() {
        let peers = Peers::new(2);
        let one: IpAddr = "10.0.0.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let first = peers.try_take(one).unwrap();
        let _second = peers.try_take(mapped).unwrap();
        assert!(peers.try_take(one).is_none(), "the third of one address");
        assert!(peers.try_take(other).is_some(), "another address");
        drop(first);
        assert!(peers.try_take(one).is_some(), "a slot given back");
        assert_eq!(peers.lock().len(), 1, "an address with none is forgotten");
    }
}
