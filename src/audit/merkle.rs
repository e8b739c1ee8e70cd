//! The RFC 6962 (RFC 9162 §2.1) Merkle tree over a chain's lines: leaf hash
//! SHA-256(0x00 ‖ line), node hash SHA-256(0x01 ‖ left ‖ right), the root of the empty tree
//! SHA-256(""). What is stored is what Go's checksum database stores (`golang.org/x/mod/sumdb/
//! tlog`): the hash of every complete subtree, each written once, in an append-only order
//! ([`stored_hash_index`]), about two hashes per leaf. A root, an inclusion proof or a
//! consistency proof of any size up to the tree's then reads O(log n) stored hashes and never
//! a line of the trail.
//!
//! The proofs are the RFC's `PATH` and `PROOF`, built by splitting the range at the largest
//! power of two below its size; the checks are RFC 9162's §2.1.3.2 and §2.1.4.2 algorithms,
//! step by step. Known answers: the RFC 6962 test leaves of transparency-dev/merkle (in the
//! tests below and in the tests' independent Python verifier).
//!
//! This module is arithmetic over a [`HashReader`]; `tree` keeps the hashes in a file.

use sha2::{Digest, Sha256};

/// A SHA-256 hash.
pub type Hash = [u8; 32];

/// Reads stored hashes by their index ([`stored_hash_index`]).
pub trait HashReader {
    /// The stored hash at `index`; an error when it is not stored (or cannot be read).
    fn read_hash(&self, index: u64) -> std::io::Result<Hash>;
}

impl HashReader for Vec<Hash> {
    fn read_hash(&self, index: u64) -> std::io::Result<Hash> {
        self.get(index as usize).copied().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("no stored hash {index}"),
            )
        })
    }
}

/// The root of the empty tree: SHA-256 of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The hash of a leaf: SHA-256(0x00 ‖ `data`).
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0u8]);
    hasher.update(data);
    hasher.finalize().into()
}

/// The hash of an interior node: SHA-256(0x01 ‖ `left` ‖ `right`).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1u8]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// Where the hash of the `n`th complete subtree of `level` (2^level leaves, starting at leaf
/// n·2^level) is stored: level L's nth hash comes right after level L+1's... so that a tree's
/// stored hashes only ever grow at the end.
pub fn stored_hash_index(level: u32, mut n: u64) -> u64 {
    for _ in 0..level {
        n = 2 * n + 1;
    }
    let mut index = 0;
    while n > 0 {
        index += n;
        n >>= 1;
    }
    index + u64::from(level)
}

/// How many hashes a tree of `n` leaves stores.
pub fn stored_hash_count(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut count = stored_hash_index(0, n - 1) + 1;
    let mut i = n - 1;
    while i & 1 != 0 {
        count += 1;
        i >>= 1;
    }
    count
}

/// The hashes to store, in order, when leaf `n` (counted from 0) with hash `leaf` is added to a
/// tree of `n` leaves: the leaf's, then one for each complete subtree it completes.
pub fn hashes_to_store(n: u64, leaf: Hash, reader: &impl HashReader) -> std::io::Result<Vec<Hash>> {
    let mut hashes = vec![leaf];
    let mut hash = leaf;
    for level in 0..(n + 1).trailing_zeros() {
        let left = reader.read_hash(stored_hash_index(level, (n >> level) - 1))?;
        hash = node_hash(&left, &hash);
        hashes.push(hash);
    }
    Ok(hashes)
}

/// The largest power of two smaller than `n` (n ≥ 2), and its exponent.
fn split(n: u64) -> (u64, u32) {
    let level = 63 - (n - 1).leading_zeros();
    (1 << level, level)
}

/// The hash of the leaves `[lo, hi)`, from the stored hashes of the complete subtrees that
/// cover it left to right (the range must start on a boundary of the first).
fn subtree_hash(mut lo: u64, hi: u64, reader: &impl HashReader) -> std::io::Result<Hash> {
    let mut parts = Vec::new();
    while lo < hi {
        // The largest complete subtree that starts at `lo` and fits.
        let (size, level) = split(hi - lo + 1);
        parts.push(reader.read_hash(stored_hash_index(level, lo >> level))?);
        lo += size;
    }
    let mut hash = parts
        .pop()
        .ok_or_else(|| std::io::Error::other("empty range"))?;
    while let Some(left) = parts.pop() {
        hash = node_hash(&left, &hash);
    }
    Ok(hash)
}

/// The root of the tree of its first `size` leaves.
pub fn root(size: u64, reader: &impl HashReader) -> std::io::Result<Hash> {
    if size == 0 {
        return Ok(empty_root());
    }
    subtree_hash(0, size, reader)
}

/// The inclusion proof of leaf `index` in the tree of `size` leaves (RFC 6962 `PATH`): the
/// hashes from the leaf's side up to the root's.
pub fn inclusion_proof(
    index: u64,
    size: u64,
    reader: &impl HashReader,
) -> std::io::Result<Vec<Hash>> {
    if index >= size {
        return Err(std::io::Error::other(format!(
            "leaf {index} is not in a tree of {size} leaves"
        )));
    }
    let mut proof = Vec::new();
    path(0, size, index, reader, &mut proof)?;
    Ok(proof)
}

fn path(
    lo: u64,
    hi: u64,
    index: u64,
    reader: &impl HashReader,
    proof: &mut Vec<Hash>,
) -> std::io::Result<()> {
    if hi - lo == 1 {
        return Ok(());
    }
    let (k, _) = split(hi - lo);
    if index < lo + k {
        path(lo, lo + k, index, reader, proof)?;
        proof.push(subtree_hash(lo + k, hi, reader)?);
    } else {
        path(lo + k, hi, index, reader, proof)?;
        proof.push(subtree_hash(lo, lo + k, reader)?);
    }
    Ok(())
}

/// The consistency proof between the trees of `old` and `new` leaves (RFC 6962 `PROOF`):
/// empty when `old` is 0 or equal to `new`.
pub fn consistency_proof(
    old: u64,
    new: u64,
    reader: &impl HashReader,
) -> std::io::Result<Vec<Hash>> {
    if old > new {
        return Err(std::io::Error::other(format!(
            "a tree of {old} leaves is no prefix of one of {new}"
        )));
    }
    let mut proof = Vec::new();
    if old > 0 && old < new {
        subproof(0, new, old, true, reader, &mut proof)?;
    }
    Ok(proof)
}

/// RFC 6962 `SUBPROOF(m, D[lo:hi], whole)`, where `whole` says `D[lo:lo+m]` is the old tree
/// itself (whose root the verifier has).
fn subproof(
    lo: u64,
    hi: u64,
    old_end: u64,
    whole: bool,
    reader: &impl HashReader,
    proof: &mut Vec<Hash>,
) -> std::io::Result<()> {
    if old_end == hi {
        if !whole {
            proof.push(subtree_hash(lo, hi, reader)?);
        }
        return Ok(());
    }
    let (k, _) = split(hi - lo);
    if old_end <= lo + k {
        subproof(lo, lo + k, old_end, whole, reader, proof)?;
        proof.push(subtree_hash(lo + k, hi, reader)?);
    } else {
        subproof(lo + k, hi, old_end, false, reader, proof)?;
        proof.push(subtree_hash(lo, lo + k, reader)?);
    }
    Ok(())
}

/// RFC 9162 §2.1.3.2: whether `proof` shows the leaf with hash `leaf` at `index` in the tree
/// of `size` leaves whose root is `root`.
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> bool {
    if index >= size {
        return false;
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && &r == root
}

/// RFC 9162 §2.1.4.2: whether `proof` shows the tree of `old` leaves with root `old_root` to be
/// a prefix of the tree of `new` leaves with root `new_root`. Equal sizes need an empty proof
/// and equal roots; from the empty tree, an empty proof (and the empty root).
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> bool {
    if old > new {
        return false;
    }
    if old == new {
        return proof.is_empty() && old_root == new_root;
    }
    if old == 0 {
        return proof.is_empty() && *old_root == empty_root();
    }
    if proof.is_empty() {
        return false;
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let (mut fn_, mut sn) = (old - 1, new - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    &fr == old_root && &sr == new_root && sn == 0
}

/// The root of a growing tree, leaf by leaf, with no stored hashes: the roots of the complete
/// subtrees of the leaves so far, largest first. For reading a whole trail once
/// (`audit verify`), comparing each signed checkpoint with the lines it covers, and for the
/// writer's own tree state, which its checkpoints sign.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    /// How many leaves.
    size: u64,
    /// The complete subtrees' roots, largest (leftmost) first.
    subtrees: Vec<Hash>,
}

impl Frontier {
    /// The frontier of the first `size` leaves of a stored tree.
    pub fn of_stored(size: u64, reader: &impl HashReader) -> std::io::Result<Self> {
        let mut subtrees = Vec::new();
        let mut lo = 0;
        while lo < size {
            let (part, level) = split(size - lo + 1);
            subtrees.push(reader.read_hash(stored_hash_index(level, lo >> level))?);
            lo += part;
        }
        Ok(Self { size, subtrees })
    }

    /// Adds the leaf with hash `leaf`.
    pub fn push(&mut self, leaf: Hash) {
        let mut hash = leaf;
        let mut size = self.size;
        while size & 1 == 1 {
            let left = self.subtrees.pop().unwrap_or_default();
            hash = node_hash(&left, &hash);
            size >>= 1;
        }
        self.subtrees.push(hash);
        self.size += 1;
    }

    /// How many leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The root of the leaves so far.
    pub fn root(&self) -> Hash {
        let mut hashes = self.subtrees.iter().rev();
        let Some(last) = hashes.next() else {
            return empty_root();
        };
        hashes.fold(*last, |right, left| node_hash(left, &right))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RFC 6962 test leaves of transparency-dev/merkle (`testonly/constants.go`).
    const LEAVES: [&str; 8] = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ];

    /// Their roots by size, 0 to 8.
    const ROOTS: [&str; 9] = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];

    fn h(hex_text: &str) -> Hash {
        hex::decode(hex_text).unwrap().try_into().unwrap()
    }

    /// The stored hashes of the test tree, appended leaf by leaf as the trail does.
    fn stored(leaves: usize) -> Vec<Hash> {
        let mut store: Vec<Hash> = Vec::new();
        for (n, leaf) in LEAVES.iter().take(leaves).enumerate() {
            let leaf = leaf_hash(&hex::decode(leaf).unwrap());
            let more = hashes_to_store(n as u64, leaf, &store).unwrap();
            store.extend(more);
        }
        assert_eq!(store.len() as u64, stored_hash_count(leaves as u64));
        store
    }

    #[test]
    fn the_roots_of_the_rfc_test_tree_are_the_published_ones() {
        let store = stored(8);
        let mut frontier = Frontier::default();
        for (size, expected) in ROOTS.iter().enumerate() {
            assert_eq!(
                root(size as u64, &store).unwrap(),
                h(expected),
                "size {size}"
            );
            assert_eq!(frontier.root(), h(expected), "frontier at {size}");
            assert_eq!(
                Frontier::of_stored(size as u64, &store).unwrap().root(),
                h(expected)
            );
            if let Some(leaf) = LEAVES.get(size) {
                frontier.push(leaf_hash(&hex::decode(leaf).unwrap()));
            }
        }
    }

    #[test]
    fn published_inclusion_and_consistency_proofs_are_made_and_checked() {
        let store = stored(8);
        let leaf = |i: usize| leaf_hash(&hex::decode(LEAVES[i]).unwrap());
        let inclusions: [(u64, u64, &[&str]); 5] = [
            (0, 1, &[]),
            (
                0,
                2,
                &["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"],
            ),
            (
                0,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                5,
                8,
                &[
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
            (
                2,
                3,
                &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
            ),
        ];
        for (index, size, expected) in inclusions {
            let proof = inclusion_proof(index, size, &store).unwrap();
            let expected: Vec<Hash> = expected.iter().map(|e| h(e)).collect();
            assert_eq!(proof, expected, "PATH({index}, {size})");
            let root = h(ROOTS[size as usize]);
            assert!(verify_inclusion(
                index,
                size,
                &leaf(index as usize),
                &proof,
                &root
            ));
            assert!(!verify_inclusion(
                index,
                size,
                &leaf((index as usize + 1) % 8),
                &proof,
                &root
            ));
        }
        let consistencies: [(u64, u64, &[&str]); 3] = [
            (
                1,
                8,
                &[
                    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
                ],
            ),
            (
                2,
                5,
                &[
                    "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                ],
            ),
            (
                6,
                8,
                &[
                    "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                    "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
                ],
            ),
        ];
        for (old, new, expected) in consistencies {
            let proof = consistency_proof(old, new, &store).unwrap();
            let expected: Vec<Hash> = expected.iter().map(|e| h(e)).collect();
            assert_eq!(proof, expected, "PROOF({old}, {new})");
            let (old_root, new_root) = (h(ROOTS[old as usize]), h(ROOTS[new as usize]));
            assert!(verify_consistency(old, new, &old_root, &new_root, &proof));
            assert!(!verify_consistency(old, new, &new_root, &new_root, &proof));
        }
    }

    #[test]
    fn every_proof_of_every_size_up_to_70_checks_and_a_changed_one_does_not() {
        let mut store: Vec<Hash> = Vec::new();
        let leaves: Vec<Hash> = (0..70u32).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        for (n, leaf) in leaves.iter().enumerate() {
            let more = hashes_to_store(n as u64, *leaf, &store).unwrap();
            store.extend(more);
        }
        for new in 1..=70u64 {
            let new_root = root(new, &store).unwrap();
            for index in 0..new {
                let proof = inclusion_proof(index, new, &store).unwrap();
                assert!(verify_inclusion(
                    index,
                    new,
                    &leaves[index as usize],
                    &proof,
                    &new_root
                ));
                if let Some(first) = proof.first() {
                    let mut bad = proof.clone();
                    bad[0] = node_hash(first, first);
                    assert!(!verify_inclusion(
                        index,
                        new,
                        &leaves[index as usize],
                        &bad,
                        &new_root
                    ));
                }
            }
            for old in 0..=new {
                let old_root = root(old, &store).unwrap();
                let proof = consistency_proof(old, new, &store).unwrap();
                assert!(
                    verify_consistency(old, new, &old_root, &new_root, &proof),
                    "{old} {new}"
                );
                if old > 0 && old < new {
                    let forked = leaf_hash(b"another history");
                    assert!(!verify_consistency(old, new, &forked, &new_root, &proof));
                }
            }
        }
        assert!(inclusion_proof(5, 5, &store).is_err());
        assert!(consistency_proof(6, 5, &store).is_err());
    }
}
