//! Who gets the next work slot. There is one slot per CPU for CPU work off the async
//! threads (Produce rewrites, and any handler's work in either direction); requests
//! waiting for one are queued by lane (a Produce request's topic, or the default lane
//! of work with no topic) and, within a lane, by connection.
//!
//! A freed slot goes to the lane that has spent the least CPU time ("virtual time", as
//! a fair-share CPU scheduler keeps it): each grant charges the lane its recent CPU per
//! job at once, corrected to the job's measured thread CPU time when the slot comes
//! back. A lane that starts waiting begins at the virtual time of the last grant, so it
//! neither carries credit from idling nor starts behind lanes that flood: a light
//! topic's request waits for the rewrites already running, not for a heavy topic's
//! queue. Within a lane the connections with waiting requests take turns, one request
//! each, their own requests in arrival order.
//!
//! Cheap work overtakes expensive work: besides the regular slots there are as many
//! express slots, taken only when no regular slot is free, and only by a lane whose
//! measured CPU per job is at most [`EXPRESS_MAX_COST`] (a lane not measured yet is
//! not cheap). The kernel time-slices the express jobs with the expensive ones, so a
//! light topic's request runs while a heavy rewrite of hundreds of milliseconds is
//! under way instead of after it. The overload fallback (a Produce request past its
//! deadline, rewritten at a cheaper setting) takes an express slot without queueing
//! ([`Scheduler::try_express`]); its cost is charged to the lane but never taught to
//! its estimate, which describes the lane's normal work. Lanes' estimates outlive the
//! lanes (a bounded memory), so a topic sending a request now and then keeps its
//! measured cost between requests.
//!
//! A waiter may give a deadline: past it the scheduler refuses ([`Overloaded`]) and
//! the caller goes on without the work (a Produce request is forwarded as sent). A
//! waiter dropped while it waits leaves no trace, and a slot granted to a waiter that
//! is gone comes straight back. Lanes exist only while they hold waiters or running
//! work, so their number is bounded by the requests in flight.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// What a job's CPU time is assumed to be before any job was measured.
const FIRST_ESTIMATE: Duration = Duration::from_millis(1);

/// The most CPU per job (as measured of the lane's recent jobs) that lets a lane's
/// waiter take an express slot: an lz4 or snappy rewrite of a few hundred KiB, well
/// under a scheduler tick of the kernel's, so express jobs barely slow what they
/// interleave with.
pub(crate) const EXPRESS_MAX_COST: Duration = Duration::from_millis(5);

/// Lanes whose estimates are remembered once the lanes are gone; past it the memory
/// starts over (the bound only matters against clients inventing topic names).
const REMEMBERED_ESTIMATES: usize = 4096;

/// Where a waiting job queues: its lane (a topic, or `None` for work with no topic)
/// and its connection within the lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkKey {
    pub(crate) lane: Option<Arc<str>>,
    pub(crate) connection: u64,
}

/// No slot was free for the job before its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no work slot before the deadline")]
pub(crate) struct Overloaded;

/// The work slots and their waiters.
#[derive(Clone)]
pub(crate) struct Scheduler {
    state: Arc<Mutex<State>>,
    /// Regular slots, fixed at creation.
    slots: usize,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        f.debug_struct("Scheduler")
            .field("slots", &state.slots)
            .field("free", &state.free)
            .field("express_slots", &state.express_slots)
            .field("express_free", &state.express_free)
            .field("lanes", &state.lanes.len())
            .finish()
    }
}

struct State {
    slots: usize,
    free: usize,
    /// Express slots (as many as regular ones) and how many are free.
    express_slots: usize,
    express_free: usize,
    /// Lanes' estimates once the lanes are gone: recent CPU per job (nanoseconds),
    /// from measured jobs only.
    estimates: HashMap<Option<Arc<str>>, u64>,
    lanes: HashMap<Option<Arc<str>>, Lane>,
    /// The virtual time of the last grant: where a lane that starts waiting begins.
    floor: u64,
    /// Orders lanes of equal virtual time (older first) and names waiters.
    next_seq: u64,
    /// Recent CPU per job, all lanes (nanoseconds): a new lane's first estimate.
    cost_estimate: u64,
}

struct Lane {
    /// CPU time charged to the lane (nanoseconds), on the scheduler's virtual clock.
    vtime: u64,
    /// When the lane started waiting, for ties.
    seq: u64,
    /// Its jobs running now.
    running: usize,
    /// Recent CPU per job of this lane (nanoseconds): what a grant charges up front.
    cost_estimate: u64,
    /// Whether `cost_estimate` comes from a job of this lane (else it is a guess).
    measured: bool,
    /// Connections with waiting jobs, in turn order, each with its waiters in order.
    turns: VecDeque<(u64, VecDeque<Waiter>)>,
}

struct Waiter {
    id: u64,
    grant: oneshot::Sender<WorkPermit>,
}

/// Which pool a slot is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pool {
    Regular,
    Express,
}

/// A slot held: the job runs while it lives; dropping it frees the slot.
pub(crate) struct WorkPermit {
    state: Arc<Mutex<State>>,
    lane: Option<Arc<str>>,
    pool: Pool,
    /// Whether the job's CPU time teaches the lane's estimate (not for a fallback job,
    /// whose cost says nothing of the lane's normal work).
    learn: bool,
    /// What the grant charged the lane up front.
    charged: u64,
    /// The job's measured CPU time, replacing the charge when the slot comes back.
    cpu: Option<Duration>,
}

impl fmt::Debug for WorkPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkPermit")
            .field("lane", &self.lane)
            .field("pool", &self.pool)
            .field("charged", &self.charged)
            .field("cpu", &self.cpu)
            .finish()
    }
}

impl WorkPermit {
    /// Records the job's CPU time, charged to its lane when the slot is freed.
    pub(crate) fn charge(&mut self, cpu: Duration) {
        self.cpu = Some(cpu);
    }

    /// The pool the slot is of.
    #[cfg(test)]
    pub(crate) fn pool(&self) -> Pool {
        self.pool
    }
}

impl Drop for WorkPermit {
    fn drop(&mut self) {
        let grants = {
            let mut state = lock(&self.state);
            state.release(self);
            state.dispatch(&self.state)
        };
        send(grants);
    }
}

type Grants = Vec<(oneshot::Sender<WorkPermit>, WorkPermit)>;

/// Hands out grants made under the lock, after it is released: a grant whose waiter is
/// gone drops its permit here, which frees the slot again.
fn send(grants: Grants) {
    for (grant, permit) in grants {
        drop(grant.send(permit));
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A new estimate from the last one and a measured cost: a moving average that keeps
/// 3/4 of the past.
fn blend(estimate: u64, measured: u64) -> u64 {
    estimate - estimate / 4 + measured / 4
}

impl State {
    /// Queues a waiter for `key`; returns its id.
    fn enqueue(&mut self, key: &WorkKey, grant: oneshot::Sender<WorkPermit>) -> u64 {
        let (id, floor) = (self.next_seq, self.floor);
        self.next_seq += 1;
        let lane = self.lane(&key.lane, id);
        if lane.turns.is_empty() {
            // Idle time earns no credit; work still running keeps what it was charged.
            lane.vtime = lane.vtime.max(floor);
            lane.seq = id;
        }
        let waiter = Waiter { id, grant };
        match lane
            .turns
            .iter_mut()
            .find(|(conn, _)| *conn == key.connection)
        {
            Some((_, queue)) => queue.push_back(waiter),
            None => lane
                .turns
                .push_back((key.connection, VecDeque::from([waiter]))),
        }
        id
    }

    /// Takes waiter `id` of `key` out of its queue; false if it is not queued (granted).
    fn withdraw(&mut self, key: &WorkKey, id: u64) -> bool {
        let Some(lane) = self.lanes.get_mut(&key.lane) else {
            return false;
        };
        let Some(at) = lane
            .turns
            .iter()
            .position(|(conn, _)| *conn == key.connection)
        else {
            return false;
        };
        let queue = &mut lane.turns[at].1;
        let Some(pos) = queue.iter().position(|w| w.id == id) else {
            return false;
        };
        queue.remove(pos);
        if queue.is_empty() {
            lane.turns.remove(at);
        }
        self.forget_if_idle(&key.lane);
        true
    }

    /// `key`'s lane, made (with its remembered estimate, if any) when there is none;
    /// `seq` orders a new lane among equals.
    fn lane(&mut self, key: &Option<Arc<str>>, seq: u64) -> &mut Lane {
        let (floor, guess) = (self.floor, self.cost_estimate);
        let remembered = self.estimates.get(key).copied();
        self.lanes.entry(key.clone()).or_insert_with(|| Lane {
            vtime: floor,
            seq,
            running: 0,
            cost_estimate: remembered.unwrap_or(guess),
            measured: remembered.is_some(),
            turns: VecDeque::new(),
        })
    }

    fn forget_if_idle(&mut self, lane: &Option<Arc<str>>) {
        if !self
            .lanes
            .get(lane)
            .is_some_and(|l| l.running == 0 && l.turns.is_empty())
        {
            return;
        }
        let gone = self.lanes.remove(lane).expect("the lane just checked");
        if gone.measured {
            if self.estimates.len() >= REMEMBERED_ESTIMATES {
                self.estimates.clear();
            }
            self.estimates.insert(lane.clone(), gone.cost_estimate);
        }
    }

    fn release(&mut self, permit: &WorkPermit) {
        match permit.pool {
            Pool::Regular => self.free += 1,
            Pool::Express => self.express_free += 1,
        }
        let cpu = permit.cpu.map(nanos);
        if let (Some(cpu), true) = (cpu, permit.learn) {
            self.cost_estimate = blend(self.cost_estimate, cpu);
        }
        if let Some(l) = self.lanes.get_mut(&permit.lane) {
            l.running -= 1;
            if let Some(cpu) = cpu {
                l.vtime = l.vtime.saturating_sub(permit.charged).saturating_add(cpu);
                if permit.learn {
                    // A guess is replaced by the first measurement, not blended with it:
                    // a light lane is known to be light after one job.
                    l.cost_estimate = if l.measured {
                        blend(l.cost_estimate, cpu)
                    } else {
                        cpu
                    };
                    l.measured = true;
                }
            }
        }
        self.forget_if_idle(&permit.lane);
    }

    /// Whether `lane`'s waiters may take express slots: its jobs were measured cheap.
    fn is_cheap(lane: &Lane) -> bool {
        lane.measured && lane.cost_estimate <= nanos(EXPRESS_MAX_COST)
    }

    /// Grants every free slot to the next waiters: the lane of least virtual time
    /// (then fewer jobs running, then waiting longer), its next connection in turn;
    /// then every free express slot the same way, among cheap lanes only.
    fn dispatch(&mut self, shared: &Arc<Mutex<State>>) -> Grants {
        let mut grants = Vec::new();
        for pool in [Pool::Regular, Pool::Express] {
            while self.free_in(pool) > 0 {
                let Some(key) = self
                    .lanes
                    .iter()
                    .filter(|(_, lane)| !lane.turns.is_empty())
                    .filter(|(_, lane)| pool == Pool::Regular || State::is_cheap(lane))
                    .min_by_key(|(_, lane)| (lane.vtime, lane.running, lane.seq))
                    .map(|(key, _)| key.clone())
                else {
                    break;
                };
                let lane = self.lanes.get_mut(&key).expect("the lane just found");
                let (connection, mut queue) = lane.turns.pop_front().expect("a lane with turns");
                let waiter = queue.pop_front().expect("a turn with a waiter");
                if !queue.is_empty() {
                    lane.turns.push_back((connection, queue));
                }
                let permit = self.grant(shared, key, pool, true);
                grants.push((waiter.grant, permit));
            }
        }
        grants
    }

    fn free_in(&self, pool: Pool) -> usize {
        match pool {
            Pool::Regular => self.free,
            Pool::Express => self.express_free,
        }
    }

    /// Takes a free slot of `pool` for a job of lane `key` (which exists), charging the
    /// lane its estimate up front.
    fn grant(
        &mut self,
        shared: &Arc<Mutex<State>>,
        key: Option<Arc<str>>,
        pool: Pool,
        learn: bool,
    ) -> WorkPermit {
        let lane = self.lanes.get_mut(&key).expect("a granted lane exists");
        self.floor = self.floor.max(lane.vtime);
        // At least 1: a lane with work granted is never level with one starting.
        let charged = lane.cost_estimate.max(1);
        lane.vtime = lane.vtime.saturating_add(charged);
        lane.running += 1;
        match pool {
            Pool::Regular => self.free -= 1,
            Pool::Express => self.express_free -= 1,
        }
        WorkPermit {
            state: Arc::clone(shared),
            lane: key,
            pool,
            learn,
            charged,
            cpu: None,
        }
    }
}

/// A queued waiter: dropped before its grant (the caller gave up or was cancelled), it
/// leaves the queue.
struct Queued<'a> {
    state: &'a Arc<Mutex<State>>,
    key: &'a WorkKey,
    id: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        lock(self.state).withdraw(self.key, self.id);
    }
}

impl Scheduler {
    pub(crate) fn new(slots: usize) -> Scheduler {
        let slots = slots.max(1);
        Scheduler {
            slots,
            state: Arc::new(Mutex::new(State {
                slots,
                free: slots,
                express_slots: slots,
                express_free: slots,
                estimates: HashMap::new(),
                lanes: HashMap::new(),
                floor: 0,
                next_seq: 0,
                cost_estimate: nanos(FIRST_ESTIMATE),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// How many regular slots there are: the rewrite CPU a window holds.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Waits for a slot in `key`'s turn; with a `deadline`, at most until then
    /// ([`Overloaded`]). A slot free at once is taken even past the deadline.
    pub(crate) async fn acquire(
        &self,
        key: &WorkKey,
        deadline: Option<Instant>,
    ) -> Result<WorkPermit, Overloaded> {
        let (grant, granted) = oneshot::channel();
        let (id, grants) = {
            let mut state = self.lock();
            let id = state.enqueue(key, grant);
            (id, state.dispatch(&self.state))
        };
        let queued = Queued {
            state: &self.state,
            key,
            id,
        };
        send(grants);
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, granted).await.ok(),
            None => Some(granted.await),
        };
        // Still queued (the deadline passed): leave the queue. A grant on its way to a
        // receiver dropped here frees its slot again.
        drop(queued);
        match permit {
            Some(Ok(permit)) => Ok(permit),
            // The sender goes only with the waiter, which only `queued` takes out.
            _ => Err(Overloaded),
        }
    }

    /// An express slot for a job of `key`'s lane if one is free now, whatever the
    /// lane's cost: for work chosen to be cheap (the overload fallback). Its CPU time
    /// is charged to the lane but not taught to the lane's estimate.
    pub(crate) fn try_express(&self, key: &WorkKey) -> Option<WorkPermit> {
        let mut state = self.lock();
        if state.express_free == 0 {
            return None;
        }
        let (seq, floor) = (state.next_seq, state.floor);
        state.next_seq += 1;
        let lane = state.lane(&key.lane, seq);
        if lane.turns.is_empty() {
            // As for a waiter: idle time earns no credit.
            lane.vtime = lane.vtime.max(floor);
        }
        Some(state.grant(&self.state, key.lane.clone(), Pool::Express, false))
    }

    /// Regular slots free now.
    #[cfg(test)]
    pub(crate) fn free(&self) -> usize {
        self.lock().free
    }

    /// Express slots free now.
    #[cfg(test)]
    pub(crate) fn express_free(&self) -> usize {
        self.lock().express_free
    }

    /// Every slot, regular and express (tests hold them to make work wait).
    #[cfg(test)]
    pub(crate) async fn hold_all(&self) -> Vec<WorkPermit> {
        let mut held = self.hold_regular().await;
        held.extend(self.hold_express());
        held
    }

    /// Every regular slot, taken as soon as each is free.
    #[cfg(test)]
    pub(crate) async fn hold_regular(&self) -> Vec<WorkPermit> {
        let key = WorkKey {
            lane: Some(Arc::from("kpress.tests.hold_all")),
            connection: u64::MAX,
        };
        let slots = self.lock().slots;
        let mut held = Vec::with_capacity(slots);
        for _ in 0..slots {
            held.push(self.acquire(&key, None).await.expect("no deadline"));
        }
        held
    }

    /// Every express slot free now.
    #[cfg(test)]
    pub(crate) fn hold_express(&self) -> Vec<WorkPermit> {
        let key = WorkKey {
            lane: Some(Arc::from("kpress.tests.hold_all")),
            connection: u64::MAX,
        };
        std::iter::from_fn(|| self.try_express(&key)).collect()
    }

    /// Waiters queued now, all lanes.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock()
            .lanes
            .values()
            .flat_map(|lane| lane.turns.iter())
            .map(|(_, queue)| queue.len())
            .sum()
    }

    /// Lanes known now.
    #[cfg(test)]
    fn lanes(&self) -> usize {
        self.lock().lanes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    fn key(lane: &str, connection: u64) -> WorkKey {
        WorkKey {
            lane: Some(Arc::from(lane)),
            connection,
        }
    }

    /// Grants in the order they were made, by label.
    type Log = Arc<StdMutex<Vec<String>>>;

    /// Queues a waiter that, once granted, logs `label` and holds its slot until told.
    fn waiter(
        scheduler: &Scheduler,
        key: WorkKey,
        label: &str,
        log: &Log,
    ) -> (
        tokio::task::JoinHandle<Result<(), Overloaded>>,
        oneshot::Sender<Duration>,
    ) {
        let (done, finish) = oneshot::channel::<Duration>();
        let (scheduler, log, label) = (scheduler.clone(), Arc::clone(log), label.to_owned());
        let task = tokio::spawn(async move {
            let mut permit = scheduler.acquire(&key, None).await?;
            log.lock().unwrap().push(label);
            if let Ok(cpu) = finish.await {
                permit.charge(cpu);
            }
            Ok(())
        });
        (task, done)
    }

    /// Lets every spawned task run until it waits (time is paused, nothing advances).
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn taken(log: &Log) -> Vec<String> {
        log.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn a_light_topic_waits_only_for_the_work_already_running() {
        let scheduler = Scheduler::new(2);
        let log = Log::default();
        let mut heavy = Vec::new();
        for i in 0..12 {
            // Two heavy connections, six requests each.
            heavy.push(waiter(
                &scheduler,
                key("heavy", i % 2),
                &format!("heavy{i}"),
                &log,
            ));
            settle().await;
        }
        assert_eq!(taken(&log), ["heavy0", "heavy1"]);
        let (light_task, light_done) = waiter(&scheduler, key("light", 7), "light", &log);
        settle().await;
        assert_eq!(scheduler.waiting(), 11);
        // One of the running heavy rewrites ends (having cost 200 ms of CPU): the freed
        // slot goes to the light request, not to the ten heavy ones queued before it.
        let (first, done) = heavy.remove(0);
        done.send(Duration::from_millis(200)).unwrap();
        first.await.unwrap().unwrap();
        settle().await;
        assert_eq!(taken(&log), ["heavy0", "heavy1", "light"]);
        light_done.send(Duration::from_micros(300)).unwrap();
        light_task.await.unwrap().unwrap();
        settle().await;
        // The light request's slot goes back to the heavy queue.
        assert_eq!(taken(&log).len(), 4);
        let (tasks, dones): (Vec<_>, Vec<_>) = heavy.into_iter().unzip();
        drop(dones);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(scheduler.free(), 2);
        assert_eq!(scheduler.lanes(), 0, "lanes go when idle");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lane_that_spent_more_cpu_yields_to_one_that_spent_less() {
        let scheduler = Scheduler::new(1);
        let log = Log::default();
        let held = scheduler.hold_all().await;
        let mut waiters = Vec::new();
        for (lane, label) in [("a", "a1"), ("a", "a2"), ("b", "b1"), ("b", "b2")] {
            waiters.push(waiter(&scheduler, key(lane, 1), label, &log));
            settle().await;
        }
        drop(held);
        // a1 runs first (a started waiting first) and costs 50 ms; b1 then costs 1 ms,
        // so b, far behind a, takes the next slot too.
        let mut order = Vec::new();
        let costs = [50, 1, 1, 1];
        for (i, cost) in costs.into_iter().enumerate() {
            settle().await;
            let last = taken(&log).last().cloned().unwrap();
            order.push(last.clone());
            let at = ["a1", "a2", "b1", "b2"]
                .iter()
                .position(|l| *l == last)
                .unwrap();
            let (_, done) = &mut waiters[at];
            let done = std::mem::replace(done, oneshot::channel().0);
            done.send(Duration::from_millis(cost)).unwrap();
            settle().await;
            assert_eq!(taken(&log).len(), (i + 2).min(4));
        }
        assert_eq!(order, ["a1", "b1", "b2", "a2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn connections_of_a_topic_take_turns() {
        let scheduler = Scheduler::new(1);
        let log = Log::default();
        let held = scheduler.hold_all().await;
        let mut waiters = Vec::new();
        // Connection 1 queues four requests before connection 2 queues two.
        for (connection, label) in [(1, "1a"), (1, "1b"), (1, "1c"), (1, "1d"), (2, "2a")] {
            waiters.push(waiter(&scheduler, key("t", connection), label, &log));
            settle().await;
        }
        waiters.push(waiter(&scheduler, key("t", 2), "2b", &log));
        settle().await;
        // Each ends as soon as it runs; they run one at a time.
        let (tasks, dones): (Vec<_>, Vec<_>) = waiters.into_iter().unzip();
        drop(dones);
        drop(held);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(taken(&log), ["1a", "2a", "1b", "2b", "1c", "1d"]);
        assert_eq!(scheduler.free(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_past_its_deadline_is_refused_and_leaves_the_queue() {
        let scheduler = Scheduler::new(1);
        let held = scheduler.hold_all().await;
        let deadline = Instant::now() + Duration::from_millis(500);
        let waiting = {
            let scheduler = scheduler.clone();
            tokio::spawn(async move { scheduler.acquire(&key("t", 1), Some(deadline)).await })
        };
        settle().await;
        assert_eq!(scheduler.waiting(), 1);
        tokio::time::sleep(Duration::from_millis(499)).await;
        assert!(!waiting.is_finished(), "refused before its deadline");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(waiting.await.unwrap().unwrap_err(), Overloaded);
        assert_eq!(scheduler.waiting(), 0);
        drop(held);
        assert_eq!(scheduler.free(), 1);
        assert_eq!(scheduler.lanes(), 0);
        // A slot free at once is taken even past the deadline.
        let late = Instant::now() - Duration::from_millis(1);
        let permit = scheduler.acquire(&key("t", 1), Some(late)).await.unwrap();
        assert_eq!(scheduler.free(), 0);
        drop(permit);
        assert_eq!(scheduler.free(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_cancelled_while_waiting_leaks_nothing() {
        let scheduler = Scheduler::new(2);
        let log = Log::default();
        let held = scheduler.hold_all().await;
        // A connection closing mid-wait: its waiting tasks are aborted.
        let (gone, _done) = waiter(&scheduler, key("t", 1), "gone", &log);
        let (kept, kept_done) = waiter(&scheduler, key("t", 2), "kept", &log);
        settle().await;
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        assert_eq!(scheduler.waiting(), 1);
        // A grant made to a waiter aborted before it could take it: the slot comes back.
        let (raced, _raced_done) = waiter(&scheduler, key("u", 3), "raced", &log);
        settle().await;
        let mut held = held.into_iter();
        drop(held.next());
        drop(held.next());
        raced.abort();
        drop(kept_done);
        let _ = raced.await;
        kept.await.unwrap().unwrap();
        drop(held);
        settle().await;
        assert_eq!(scheduler.free(), 2);
        assert_eq!(scheduler.waiting(), 0);
        assert_eq!(scheduler.lanes(), 0);
        assert!(!taken(&log).contains(&"gone".to_owned()));
    }

    /// Runs one job of `lane` to its end at `cpu`, so the lane's cost is measured.
    async fn measure(scheduler: &Scheduler, lane: &str, cpu: Duration) {
        let mut permit = scheduler.acquire(&key(lane, 99), None).await.unwrap();
        permit.charge(cpu);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cheap_lane_runs_on_an_express_slot_while_expensive_work_holds_the_rest() {
        let scheduler = Scheduler::new(2);
        let log = Log::default();
        measure(&scheduler, "heavy", Duration::from_millis(200)).await;
        measure(&scheduler, "light", Duration::from_micros(300)).await;
        assert_eq!(scheduler.lanes(), 0);
        let mut heavy = Vec::new();
        for i in 0..6 {
            heavy.push(waiter(
                &scheduler,
                key("heavy", i % 2),
                &format!("heavy{i}"),
                &log,
            ));
            settle().await;
        }
        // Both regular slots run heavy rewrites; the rest of them queue, and no express
        // slot goes to them.
        assert_eq!(taken(&log), ["heavy0", "heavy1"]);
        assert_eq!(scheduler.free(), 0);
        assert_eq!(scheduler.express_free(), 2);
        // The light topic's request starts at once, on an express slot.
        let (light, light_done) = waiter(&scheduler, key("light", 7), "light", &log);
        settle().await;
        assert_eq!(taken(&log), ["heavy0", "heavy1", "light"]);
        assert_eq!(scheduler.express_free(), 1);
        light_done.send(Duration::from_micros(250)).unwrap();
        light.await.unwrap().unwrap();
        settle().await;
        // Its express slot comes back to the express pool, not to the heavy queue.
        assert_eq!(scheduler.express_free(), 2);
        assert_eq!(taken(&log).len(), 3);
        let (tasks, dones): (Vec<_>, Vec<_>) = heavy.into_iter().unzip();
        drop(dones);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!((scheduler.free(), scheduler.express_free()), (2, 2));
        assert_eq!(scheduler.lanes(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unmeasured_or_expensive_lane_never_takes_an_express_slot() {
        let scheduler = Scheduler::new(1);
        let log = Log::default();
        // Measured at just over the threshold.
        measure(
            &scheduler,
            "costly",
            EXPRESS_MAX_COST + Duration::from_micros(1),
        )
        .await;
        let held = scheduler.acquire(&key("x", 1), None).await.unwrap();
        assert_eq!(held.pool(), Pool::Regular);
        let (costly, _costly_done) = waiter(&scheduler, key("costly", 2), "costly", &log);
        let (new, _new_done) = waiter(&scheduler, key("new", 3), "new", &log);
        settle().await;
        assert!(taken(&log).is_empty(), "{:?}", taken(&log));
        assert_eq!(scheduler.express_free(), 1);
        drop(held);
        settle().await;
        assert_eq!(taken(&log).len(), 1);
        costly.abort();
        new.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn express_slots_are_bounded() {
        let scheduler = Scheduler::new(2);
        let log = Log::default();
        measure(&scheduler, "light", Duration::from_micros(100)).await;
        let held: Vec<_> = [1, 2]
            .map(|c| {
                let scheduler = scheduler.clone();
                async move { scheduler.acquire(&key("heavy", c), None).await.unwrap() }
            })
            .into_iter()
            .collect();
        let mut permits = Vec::new();
        for h in held {
            permits.push(h.await);
        }
        let mut light = Vec::new();
        for i in 0..5 {
            light.push(waiter(&scheduler, key("light", i), &format!("l{i}"), &log));
            settle().await;
        }
        // As many run as there are express slots; the rest wait their turn.
        assert_eq!(taken(&log), ["l0", "l1"]);
        assert_eq!(scheduler.express_free(), 0);
        assert_eq!(scheduler.waiting(), 3);
        let (first, done) = light.remove(0);
        done.send(Duration::from_micros(100)).unwrap();
        first.await.unwrap().unwrap();
        settle().await;
        assert_eq!(taken(&log), ["l0", "l1", "l2"]);
        drop(permits);
        let (tasks, dones): (Vec<_>, Vec<_>) = light.into_iter().unzip();
        drop(dones);
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!((scheduler.free(), scheduler.express_free()), (2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_job_takes_a_free_express_slot_and_teaches_no_estimate() {
        let scheduler = Scheduler::new(1);
        let log = Log::default();
        measure(&scheduler, "heavy", Duration::from_millis(200)).await;
        let mut fallback = scheduler
            .try_express(&key("heavy", 1))
            .expect("one is free");
        assert_eq!(fallback.pool(), Pool::Express);
        assert!(scheduler.try_express(&key("heavy", 2)).is_none(), "bounded");
        fallback.charge(Duration::from_micros(50));
        drop(fallback);
        assert_eq!(scheduler.express_free(), 1);
        // Still expensive: its next job does not take the express slot.
        let held = scheduler.acquire(&key("x", 1), None).await.unwrap();
        let (heavy, _done) = waiter(&scheduler, key("heavy", 3), "heavy", &log);
        settle().await;
        assert!(taken(&log).is_empty());
        drop(held);
        settle().await;
        assert_eq!(taken(&log), ["heavy"]);
        heavy.abort();
    }
}
