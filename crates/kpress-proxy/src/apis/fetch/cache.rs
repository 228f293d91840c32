//! Re-encoded batches kept for the next consumer of the same batches: ten consumers of
//! one partition cost one re-encoding, not ten.
//!
//! A batch is named by its topic, partition, base offset and CRC (the CRC tells a
//! batch rewritten in place by compaction, or a truncated and refilled log, from the
//! one cached), and the codec and level it was re-encoded into (a reload may change
//! `[consumers]`' levels while entries made at the old ones remain). The cache is bounded by bytes
//! (`[consumers] cache_bytes`): each entry counts its batch's bytes, its topic name
//! and [`ENTRY_OVERHEAD`], so a flood of tiny batches is bounded too. A batch whose
//! entry would take more than an eighth of the capacity is not kept: one such batch
//! would push out many others that are as likely to be asked for again.
//!
//! Eviction is CLOCK (second chance), not strict LRU: a hit only sets its entry's
//! referenced bit, under a shared lock, so consumers hitting the cache at once never
//! wait for each other; strict LRU would move the entry on every hit, under an
//! exclusive lock. Inserting (after a re-encoding, which costs far more) takes the
//! exclusive lock and sweeps the hand: a referenced entry loses its bit and stays,
//! an unreferenced one goes.
//!
//! Consumers tailing one partition ask for a new batch at nearly the same moment, all
//! before any re-encoding of it is cached. [`ReencodedCache::get_or_reencode`] lets
//! the first re-encode it and the others wait for its result (they run on blocking
//! threads, as re-encodings do), so that case costs one re-encoding too.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};

use bytes::Bytes;
use kpress_codec::Codec;
use metrics::{Counter, Gauge};

use super::metrics::{FETCH_CACHE_BYTES, FETCH_CACHE_HITS, FETCH_CACHE_MISSES};

/// What an entry costs beyond its batch and topic name: its key, slot and index entry.
pub(crate) const ENTRY_OVERHEAD: usize = 128;
/// An entry may take at most this share (1/N) of the capacity.
const LARGEST_ENTRY_SHARE: usize = 8;

/// A stored batch as re-encoded into `codec` at `level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) base_offset: i64,
    /// The stored batch's CRC-32C.
    pub(crate) crc: u32,
    /// The codec it was re-encoded into.
    pub(crate) codec: Codec,
    /// `codec`'s level (0 for a codec without levels).
    pub(crate) level: i32,
}

/// Counts since the cache was made.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CacheStats {
    pub(crate) hits: u64,
    pub(crate) misses: u64,
    /// Bytes the entries count for now.
    pub(crate) bytes: usize,
    pub(crate) entries: usize,
}

/// A bounded, thread-safe map from [`BatchKey`] to the re-encoded batch.
#[derive(Debug)]
pub(crate) struct ReencodedCache {
    inner: RwLock<Inner>,
    /// The key hash; keyed per process, so topic names cannot be chosen to collide.
    hasher: RandomState,
    /// Read on every request's [`ReencodedCache::set_capacity`] without the lock.
    capacity: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Re-encodings under way in [`ReencodedCache::get_or_reencode`], by key hash.
    in_flight: Mutex<HashMap<u64, Arc<InFlight>>>,
}

/// A re-encoding under way: others asking for the same batch wait for its result.
#[derive(Debug)]
struct InFlight {
    key: OwnedKey,
    /// `Some(result)` once done: the bytes, or `None` when the re-encoding failed.
    done: Mutex<Option<Option<Bytes>>>,
    finished: Condvar,
}

#[derive(Debug, PartialEq, Eq)]
struct OwnedKey {
    topic: Box<str>,
    partition: i32,
    base_offset: i64,
    crc: u32,
    codec: Codec,
    level: i32,
}

impl OwnedKey {
    fn of(key: &BatchKey<'_>) -> OwnedKey {
        OwnedKey {
            topic: key.topic.into(),
            partition: key.partition,
            base_offset: key.base_offset,
            crc: key.crc,
            codec: key.codec,
            level: key.level,
        }
    }

    fn is(&self, key: &BatchKey<'_>) -> bool {
        self.partition == key.partition
            && self.base_offset == key.base_offset
            && self.crc == key.crc
            && self.codec == key.codec
            && self.level == key.level
            && *self.topic == *key.topic
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Key hash to slot. Two keys with one hash share a slot: the later insert
    /// replaces the earlier, and a lookup checks the whole key, so a collision is a
    /// miss, never a wrong batch.
    index: HashMap<u64, usize, BuildHasherDefault<KeyHashIsTheHash>>,
    slots: Vec<Slot>,
    /// Empty slots, reused before the vector grows.
    free: Vec<usize>,
    /// The CLOCK hand: the next slot to look at for eviction.
    hand: usize,
    /// Bytes the entries count for.
    held: usize,
}

#[derive(Debug)]
struct Slot {
    entry: Option<Entry>,
    referenced: AtomicBool,
}

#[derive(Debug)]
struct Entry {
    hash: u64,
    key: OwnedKey,
    bytes: Bytes,
}

impl Entry {
    fn cost(&self) -> usize {
        cost(self.key.topic.len(), self.bytes.len())
    }
}

fn cost(topic_len: usize, batch_len: usize) -> usize {
    batch_len
        .saturating_add(topic_len)
        .saturating_add(ENTRY_OVERHEAD)
}

impl ReencodedCache {
    /// An empty cache of `capacity` bytes (0: nothing is kept).
    pub(crate) fn new(capacity: usize) -> ReencodedCache {
        ReencodedCache {
            inner: RwLock::new(Inner::default()),
            hasher: RandomState::new(),
            capacity: AtomicUsize::new(capacity),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            in_flight: Mutex::default(),
        }
    }

    /// The process's cache, made at `[consumers] cache_bytes`' default; the Fetch
    /// handler sets the capacity of the policy in force with
    /// [`ReencodedCache::set_capacity`].
    pub(crate) fn global() -> &'static ReencodedCache {
        static GLOBAL: OnceLock<ReencodedCache> = OnceLock::new();
        GLOBAL.get_or_init(|| ReencodedCache::new(kpress_config::CONSUMERS_CACHE_BYTES_DEFAULT))
    }

    fn hash(&self, key: &BatchKey<'_>) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The batch re-encoded as `key` says, counted as a hit or a miss. Allocates
    /// nothing: a hit clones the stored `Bytes` (a reference count).
    pub(crate) fn get(&self, key: &BatchKey<'_>) -> Option<Bytes> {
        let found = self.lookup(self.hash(key), key);
        self.count(found.is_some());
        found
    }

    fn lookup(&self, hash: u64, key: &BatchKey<'_>) -> Option<Bytes> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let &at = inner.index.get(&hash)?;
        let slot = &inner.slots[at];
        let entry = slot.entry.as_ref().filter(|e| e.key.is(key))?;
        slot.referenced.store(true, Ordering::Relaxed);
        Some(entry.bytes.clone())
    }

    fn count(&self, hit: bool) {
        if hit {
            self.hits.fetch_add(1, Ordering::Relaxed);
            handles().hits.increment(1);
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            handles().misses.increment(1);
        }
    }

    /// The batch re-encoded as `key` says: from the cache, from another thread's
    /// re-encoding of it under way (waited for), or from `reencode`, whose result is
    /// then kept. Counted as a hit unless `reencode` ran. Blocks while another thread
    /// re-encodes the batch: call it where the re-encoding itself would run.
    pub(crate) fn get_or_reencode<E>(
        &self,
        key: &BatchKey<'_>,
        reencode: impl FnOnce() -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let hash = self.hash(key);
        if let Some(bytes) = self.lookup(hash, key) {
            self.count(true);
            return Ok(bytes);
        }
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let leader = match in_flight.get(&hash) {
            Some(other) if other.key.is(key) => {
                let other = Arc::clone(other);
                drop(in_flight);
                if let Some(bytes) = other.wait() {
                    self.count(true);
                    return Ok(bytes);
                }
                // It failed: this thread tries on its own.
                None
            }
            // Another key of the same hash is under way: no waiting for it.
            Some(_) => {
                drop(in_flight);
                None
            }
            None => {
                // It may have been finished and kept since the lookup above.
                if let Some(bytes) = self.lookup(hash, key) {
                    self.count(true);
                    return Ok(bytes);
                }
                let flight = Arc::new(InFlight {
                    key: OwnedKey::of(key),
                    done: Mutex::new(None),
                    finished: Condvar::new(),
                });
                in_flight.insert(hash, Arc::clone(&flight));
                // Released before the re-encoding, which others must not wait on
                // to learn of it.
                drop(in_flight);
                Some(Leader {
                    cache: self,
                    hash,
                    flight,
                    result: None,
                })
            }
        };
        self.count(false);
        let result = reencode();
        if let Ok(bytes) = &result {
            self.insert(key, bytes.clone());
        }
        if let Some(mut leader) = leader {
            leader.result = result.as_ref().ok().cloned();
            // Dropping it hands the result to the waiters.
        }
        result
    }

    /// Keeps `bytes` as the batch `key` names, evicting what it must; a batch whose
    /// entry would take more than an eighth of the capacity is not kept. Returns
    /// whether it was kept.
    pub(crate) fn insert(&self, key: &BatchKey<'_>, bytes: Bytes) -> bool {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let needed = cost(key.topic.len(), bytes.len());
        if needed > capacity / LARGEST_ENTRY_SHARE {
            return false;
        }
        let hash = self.hash(key);
        let entry = Entry {
            hash,
            key: OwnedKey::of(key),
            bytes,
        };
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let before = inner.held;
        // The key's earlier batch (or another key of the same hash) goes first.
        if let Some(at) = inner.index.get(&hash).copied() {
            inner.remove(at);
        }
        inner.evict_to(capacity - needed);
        inner.add(entry);
        let after = inner.held;
        drop(inner);
        adjust_gauge(before, after);
        true
    }

    /// Sets the capacity (a reload's `[consumers] cache_bytes`), evicting down to it.
    /// Cheap when it is unchanged: call it with every request's policy.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        if self.capacity.swap(capacity, Ordering::Relaxed) == capacity {
            return;
        }
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        let before = inner.held;
        inner.evict_to(capacity);
        // Entries now over an eighth of the capacity go too, as they would not be kept.
        let largest = capacity / LARGEST_ENTRY_SHARE;
        for at in 0..inner.slots.len() {
            if inner.slots[at]
                .entry
                .as_ref()
                .is_some_and(|e| e.cost() > largest)
            {
                inner.remove(at);
            }
        }
        let after = inner.held;
        drop(inner);
        adjust_gauge(before, after);
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> CacheStats {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: inner.held,
            entries: inner.index.len(),
        }
    }
}

impl InFlight {
    /// The leader's result: the bytes, or `None` when its re-encoding failed.
    fn wait(&self) -> Option<Bytes> {
        let mut done = self.done.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = &*done {
                return result.clone();
            }
            done = self
                .finished
                .wait(done)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The thread re-encoding a batch others may wait for. Dropped, even in a panic, it
/// hands its result (`None`: failed) to them and leaves the map of those under way.
struct Leader<'c> {
    cache: &'c ReencodedCache,
    hash: u64,
    flight: Arc<InFlight>,
    result: Option<Bytes>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        self.cache
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.hash);
        *self
            .flight
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(self.result.take());
        self.flight.finished.notify_all();
    }
}

impl Drop for ReencodedCache {
    fn drop(&mut self) {
        let held = self.inner.get_mut().map_or(0, |inner| inner.held);
        adjust_gauge(held, 0);
    }
}

impl Inner {
    fn add(&mut self, entry: Entry) {
        self.held += entry.cost();
        let hash = entry.hash;
        let slot = Slot {
            entry: Some(entry),
            referenced: AtomicBool::new(false),
        };
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at] = slot;
                at
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(hash, at);
    }

    fn remove(&mut self, at: usize) {
        if let Some(entry) = self.slots[at].entry.take() {
            self.held -= entry.cost();
            self.index.remove(&entry.hash);
            self.free.push(at);
        }
    }

    /// Evicts until the entries count for at most `target` bytes. Each slot is passed
    /// at most twice (once to clear its bit, once to evict), so this ends.
    fn evict_to(&mut self, target: usize) {
        let mut steps = 2 * self.slots.len();
        while self.held > target && steps > 0 {
            steps -= 1;
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let at = self.hand;
            self.hand += 1;
            let slot = &self.slots[at];
            if slot.entry.is_none() {
                continue;
            }
            if slot.referenced.swap(false, Ordering::Relaxed) {
                continue;
            }
            self.remove(at);
        }
    }
}

/// The key hashes are SipHash outputs already: the index uses them as they are.
#[derive(Debug, Default)]
struct KeyHashIsTheHash(u64);

impl Hasher for KeyHashIsTheHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed; fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

struct Handles {
    hits: Counter,
    misses: Counter,
    bytes: Gauge,
}

fn handles() -> &'static Handles {
    static HANDLES: OnceLock<Handles> = OnceLock::new();
    HANDLES.get_or_init(|| Handles {
        hits: metrics::counter!(FETCH_CACHE_HITS),
        misses: metrics::counter!(FETCH_CACHE_MISSES),
        bytes: metrics::gauge!(FETCH_CACHE_BYTES),
    })
}

/// The gauge sums every cache's bytes: each cache moves it by its own change.
fn adjust_gauge(before: usize, after: usize) {
    if after >= before {
        handles().bytes.increment((after - before) as f64);
    } else {
        handles().bytes.decrement((before - after) as f64);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn key(topic: &str, base_offset: i64) -> BatchKey<'_> {
        BatchKey {
            topic,
            partition: 0,
            base_offset,
            crc: 7,
            codec: Codec::Lz4,
            level: 9,
        }
    }

    /// A batch whose entry, under topic "t", costs `cost` bytes.
    fn batch(cost: usize, fill: u8) -> Bytes {
        Bytes::from(vec![fill; cost - ENTRY_OVERHEAD - 1])
    }

    #[test]
    fn a_batch_inserted_is_found_and_counted() {
        let cache = ReencodedCache::new(1 << 20);
        assert_eq!(cache.get(&key("t", 0)), None);
        assert!(cache.insert(&key("t", 0), Bytes::from_static(b"lz4 batch")));
        assert_eq!(cache.get(&key("t", 0)).as_deref(), Some(&b"lz4 batch"[..]));
        assert_eq!(cache.get(&key("t", 1)), None);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 2, 1));
        assert_eq!(stats.bytes, 9 + 1 + ENTRY_OVERHEAD);
    }

    #[test]
    fn a_hit_hands_out_the_stored_bytes_without_a_copy() {
        let cache = ReencodedCache::new(1 << 20);
        let stored = Bytes::from(vec![1u8; 1000]);
        cache.insert(&key("t", 0), stored.clone());
        let got = cache.get(&key("t", 0)).unwrap();
        assert_eq!(got.as_ptr(), stored.as_ptr());
    }

    #[test]
    fn the_key_includes_topic_partition_crc_codec_and_level() {
        let cache = ReencodedCache::new(1 << 20);
        let k = key("t", 5);
        cache.insert(&k, Bytes::from_static(b"a"));
        for other in [
            BatchKey { crc: 8, ..k },
            BatchKey {
                codec: Codec::Gzip,
                ..k
            },
            BatchKey { partition: 1, ..k },
            BatchKey { topic: "u", ..k },
            BatchKey {
                base_offset: 6,
                ..k
            },
            BatchKey { level: 1, ..k },
        ] {
            assert_eq!(cache.get(&other), None, "{other:?}");
        }
        // The same batch in two codecs: two entries.
        let gzip = BatchKey {
            codec: Codec::Gzip,
            ..k
        };
        cache.insert(&gzip, Bytes::from_static(b"g"));
        assert_eq!(cache.get(&k).as_deref(), Some(&b"a"[..]));
        assert_eq!(cache.get(&gzip).as_deref(), Some(&b"g"[..]));
        // Inserting a key again replaces its batch.
        cache.insert(&k, Bytes::from_static(b"b"));
        assert_eq!(cache.get(&k).as_deref(), Some(&b"b"[..]));
        assert_eq!(cache.stats().entries, 2);
    }

    #[test]
    fn at_capacity_the_unreferenced_go_first() {
        // Room for eight entries of 1 KiB.
        let cache = ReencodedCache::new(8 << 10);
        for offset in 0..8 {
            assert!(cache.insert(&key("t", offset), batch(1 << 10, offset as u8)));
        }
        assert_eq!(cache.stats().bytes, 8 << 10);
        // Batches 0 and 1 are asked for again; the next two inserts evict 2 and 3.
        assert!(cache.get(&key("t", 0)).is_some());
        assert!(cache.get(&key("t", 1)).is_some());
        cache.insert(&key("t", 8), batch(1 << 10, 8));
        cache.insert(&key("t", 9), batch(1 << 10, 9));
        let kept: Vec<i64> = (0..10)
            .filter(|&o| cache.get(&key("t", o)).is_some())
            .collect();
        assert_eq!(kept, [0, 1, 4, 5, 6, 7, 8, 9]);
        assert!(cache.stats().bytes <= 8 << 10);
    }

    #[test]
    fn a_batch_over_an_eighth_of_the_capacity_is_not_kept() {
        let cache = ReencodedCache::new(8 << 10);
        assert!(cache.insert(&key("t", 0), batch(1 << 10, 0)));
        assert!(!cache.insert(&key("t", 1), batch((1 << 10) + 1, 1)));
        assert_eq!(cache.get(&key("t", 1)), None);
        assert!(cache.get(&key("t", 0)).is_some());
        let none = ReencodedCache::new(0);
        assert!(!none.insert(&key("t", 0), Bytes::from_static(b"x")));
        assert_eq!(none.stats().bytes, 0);
    }

    #[test]
    fn a_smaller_capacity_evicts_down_to_it() {
        let cache = ReencodedCache::new(16 << 10);
        for offset in 0..16 {
            cache.insert(&key("t", offset), batch(1 << 10, 0));
        }
        assert_eq!(cache.stats().entries, 16);
        cache.set_capacity(8 << 10);
        assert!(cache.stats().bytes <= 8 << 10);
        assert_eq!(cache.stats().entries, 8);
        // Entries over an eighth of the new capacity go too.
        cache.set_capacity(4 << 10);
        assert_eq!(cache.stats().entries, 0);
        cache.set_capacity(0);
        assert!(!cache.insert(&key("t", 0), Bytes::from_static(b"x")));
    }

    #[test]
    fn consumers_asking_at_once_cost_one_reencoding() {
        const THREADS: usize = 6;
        let cache = Arc::new(ReencodedCache::new(1 << 20));
        let reencodings = Arc::new(AtomicUsize::new(0));
        let start = Arc::new(std::sync::Barrier::new(THREADS));
        let consumers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (cache, reencodings, start) = (
                    Arc::clone(&cache),
                    Arc::clone(&reencodings),
                    Arc::clone(&start),
                );
                std::thread::spawn(move || {
                    start.wait();
                    cache.get_or_reencode(&key("t", 0), || {
                        reencodings.fetch_add(1, Ordering::Relaxed);
                        // Long enough that the others usually find it under way (they
                        // find it cached otherwise: one re-encoding either way).
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        Ok::<_, ()>(Bytes::from_static(b"once"))
                    })
                })
            })
            .collect();
        for consumer in consumers {
            assert_eq!(
                consumer.join().unwrap().unwrap(),
                Bytes::from_static(b"once")
            );
        }
        assert_eq!(reencodings.load(Ordering::Relaxed), 1);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (THREADS as u64 - 1, 1));
        assert!(cache.in_flight.lock().unwrap().is_empty());
    }

    #[test]
    fn a_failed_or_panicked_reencoding_is_not_kept_and_is_tried_again() {
        let cache = ReencodedCache::new(1 << 20);
        assert_eq!(
            cache.get_or_reencode(&key("t", 0), || Err("damaged")),
            Err("damaged")
        );
        assert_eq!(cache.stats().entries, 0);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cache.get_or_reencode(&key("t", 0), || -> Result<Bytes, ()> { panic!("codec") })
        }));
        assert!(panicked.is_err());
        assert!(cache.in_flight.lock().unwrap().is_empty());
        let again = cache.get_or_reencode(&key("t", 0), || Ok::<_, ()>(Bytes::from_static(b"ok")));
        assert_eq!(again, Ok(Bytes::from_static(b"ok")));
        assert_eq!(cache.get(&key("t", 0)), Some(Bytes::from_static(b"ok")));
    }

    #[test]
    fn the_process_has_one_cache() {
        assert!(std::ptr::eq(
            ReencodedCache::global(),
            ReencodedCache::global()
        ));
    }

    #[test]
    fn threads_share_it_and_it_stays_bounded() {
        const THREADS: usize = 4;
        const CAPACITY: usize = 64 << 10;
        let cache = Arc::new(ReencodedCache::new(CAPACITY));
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let cache = Arc::clone(&cache);
                std::thread::spawn(move || {
                    let mut hits = 0;
                    for round in 0..2_000i64 {
                        // Half of the keys are shared by every thread.
                        let offset = if round % 2 == 0 {
                            round % 32
                        } else {
                            1_000 + t as i64 * 10_000 + round
                        };
                        let k = key("shared", offset);
                        match cache.get(&k) {
                            Some(bytes) => {
                                assert_eq!(bytes[0], (offset % 251) as u8, "{k:?}");
                                hits += 1;
                            }
                            None => {
                                let fill = (offset % 251) as u8;
                                cache.insert(
                                    &k,
                                    Bytes::from(vec![fill; 500 + (round % 700) as usize]),
                                );
                            }
                        }
                        assert!(cache.stats().bytes <= CAPACITY);
                    }
                    hits
                })
            })
            .collect();
        let hits: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let stats = cache.stats();
        assert_eq!(stats.hits, hits);
        assert_eq!(stats.hits + stats.misses, (THREADS * 2_000) as u64);
        assert!(hits > 0, "the shared keys were found");
        assert!(stats.bytes <= CAPACITY);
        // The index and the slots agree.
        let inner = cache.inner.read().unwrap();
        let live = inner.slots.iter().filter(|s| s.entry.is_some()).count();
        assert_eq!(live, inner.index.len());
        let held: usize = inner
            .slots
            .iter()
            .filter_map(|s| s.entry.as_ref())
            .map(Entry::cost)
            .sum();
        assert_eq!(held, inner.held);
    }
}
