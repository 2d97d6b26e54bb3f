//! Delivery that loses nothing silently and never holds up recording.
//!
//! Encoded profiles go into a bounded channel (crossbeam) that one thread
//! empties, sending each in turn. [`Delivery::push`] never waits: when the
//! queue is full it takes the oldest waiting profile out and counts it
//! dropped, so a slow or dead receiver costs memory of at most the queue's
//! profiles plus the one being sent. A failed attempt that may succeed later
//! (unreachable, timed out, overloaded: OTLP's retryable answers) is tried
//! again after a backoff that doubles from [`BACKOFF_MIN`] to
//! [`BACKOFF_MAX`] (or the server's `Retry-After`), with jitter; a refusal
//! (a bad request, bad credentials) is said and counted, and the next
//! profile goes on. [`Delivery::finish`] sends what is queued until a
//! deadline, counts what is left unsent, and returns the totals: every
//! profile handed over is sent, dropped, refused or unsent.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};

use super::endpoint::{Endpoint, Protocol};
use super::transport::{Failure, Transport};

/// First wait after a failed attempt.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest wait between two attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Waits between attempts while flushing at exit.
const FLUSH_BACKOFF: Duration = Duration::from_millis(250);
/// Refusals said one by one; later ones are only counted.
const SAID_REFUSALS: u64 = 10;

/// How profiles are delivered.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where.
    pub endpoint: Endpoint,
    /// Extra request headers (never shown: they may hold credentials).
    pub headers: Vec<(String, String)>,
    /// Bodies are gzipped.
    pub gzip: bool,
    /// Profiles that may wait (besides the one being sent).
    pub queue: usize,
    /// The most one attempt may take.
    pub timeout: Duration,
    /// Say every failed attempt, not just the first of an outage.
    pub verbose: bool,
}

/// One encoded request and what it holds.
#[derive(Debug, Clone)]
pub struct Payload {
    /// The request, gzipped when the settings say so.
    pub body: Vec<u8>,
    /// Samples (or microseconds) in it.
    pub samples: u64,
    /// Its interval's number (1 for a single profile).
    pub number: u64,
}

/// Where every profile handed over went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Handed over.
    pub queued: u64,
    /// Their samples.
    pub queued_samples: u64,
    /// Taken by the receiver.
    pub sent: u64,
    /// Their samples.
    pub sent_samples: u64,
    /// Compressed bytes sent.
    pub sent_bytes: u64,
    /// The largest request handed over, in bytes as sent.
    pub largest_bytes: u64,
    /// Failed attempts tried again.
    pub retried: u64,
    /// Dropped from a full queue, oldest first.
    pub dropped: u64,
    /// Their samples.
    pub dropped_samples: u64,
    /// Refused by the receiver (not retried).
    pub refused: u64,
    /// Their samples.
    pub refused_samples: u64,
    /// Still queued or being sent when the time to flush ran out.
    pub unsent: u64,
    /// Their samples.
    pub unsent_samples: u64,
    /// Profiles the receiver took but said it rejected (partial success).
    pub rejected_by_receiver: u64,
}

impl Totals {
    /// Profiles that did not reach the receiver.
    pub fn lost(&self) -> u64 {
        self.dropped + self.refused + self.unsent
    }
}

struct Shared {
    totals: Mutex<Totals>,
    /// Set by `finish`: attempts end by then.
    flush_by: Mutex<Option<Instant>>,
}

impl Shared {
    fn totals(&self) -> std::sync::MutexGuard<'_, Totals> {
        self.totals.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn flush_by(&self) -> Option<Instant> {
        *self.flush_by.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The queue and its sending thread.
pub struct Delivery {
    tx: Sender<Payload>,
    /// The queue's other end, to take the oldest out when it is full.
    rx: Receiver<Payload>,
    /// Dropped by `finish`, which wakes a sleeping backoff.
    stop: Option<Sender<()>>,
    done: Receiver<()>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    capacity: usize,
    said_full: bool,
}

impl Delivery {
    /// Starts the sending thread.
    pub fn start(settings: Settings) -> std::io::Result<Delivery> {
        let transport: Box<dyn Transport> = match settings.endpoint.protocol {
            Protocol::Grpc => Box::new(super::grpc::GrpcTransport::new(
                settings.endpoint.clone(),
                settings.headers.clone(),
            )),
            Protocol::Http => Box::new(super::http::HttpTransport::new(
                settings.endpoint.clone(),
                settings.headers.clone(),
            )),
        };
        Delivery::with_transport(settings, transport)
    }

    /// Starts the sending thread over `transport`.
    pub fn with_transport(
        settings: Settings,
        transport: Box<dyn Transport>,
    ) -> std::io::Result<Delivery> {
        let capacity = settings.queue.max(1);
        let (tx, rx) = bounded(capacity);
        let (stop_tx, stop_rx) = bounded(0);
        let (done_tx, done) = bounded(1);
        let shared = Arc::new(Shared {
            totals: Mutex::new(Totals::default()),
            flush_by: Mutex::new(None),
        });
        let worker = Worker {
            transport,
            rx: rx.clone(),
            stop: stop_rx,
            shared: Arc::clone(&shared),
            settings,
            outage: None,
            refusals: 0,
        };
        let thread = std::thread::Builder::new()
            .name("bprof-otlp".into())
            .spawn(move || {
                worker.run();
                let _ = done_tx.send(());
            })?;
        Ok(Delivery {
            tx,
            rx,
            stop: Some(stop_tx),
            done,
            shared,
            thread: Some(thread),
            capacity,
            said_full: false,
        })
    }

    /// Queues a profile; never waits. A full queue loses its oldest.
    pub fn push(&mut self, p: Payload) {
        {
            let mut t = self.shared.totals();
            t.queued += 1;
            t.queued_samples += p.samples;
            t.largest_bytes = t.largest_bytes.max(p.body.len() as u64);
        }
        let mut p = p;
        loop {
            match self.tx.try_send(p) {
                Ok(()) => return,
                Err(TrySendError::Full(back)) => {
                    p = back;
                    if let Ok(old) = self.rx.try_recv() {
                        let mut t = self.shared.totals();
                        t.dropped += 1;
                        t.dropped_samples += old.samples;
                        if !self.said_full {
                            self.said_full = true;
                            eprintln!(
                                "bprof: the OTLP queue is full ({} profiles waiting): the oldest are dropped and counted",
                                self.capacity
                            );
                        }
                    }
                }
                // The thread is gone: finish counts the profile unsent.
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }

    /// Sends what is queued until `budget` has passed, then returns where
    /// every profile went. The thread is left behind (and ends with the
    /// process) if an attempt overruns.
    pub fn finish(mut self, budget: Duration) -> Totals {
        let by = Instant::now() + budget;
        *self
            .shared
            .flush_by
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(by);
        drop(self.stop.take());
        let Delivery {
            tx,
            rx,
            done,
            shared,
            thread,
            ..
        } = self;
        drop(tx);
        drop(rx);
        // A little past the deadline: the last attempt's own timeout.
        let grace = Duration::from_millis(500);
        match done.recv_deadline(by + grace) {
            Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                if let Some(t) = thread {
                    let _ = t.join();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        let mut t = *shared.totals();
        let accounted = t.sent + t.dropped + t.refused + t.unsent;
        if t.queued > accounted {
            let samples = t.sent_samples + t.dropped_samples + t.refused_samples + t.unsent_samples;
            t.unsent += t.queued - accounted;
            t.unsent_samples += t.queued_samples.saturating_sub(samples);
        }
        t
    }
}

/// The sending thread's state.
struct Worker {
    transport: Box<dyn Transport>,
    rx: Receiver<Payload>,
    stop: Receiver<()>,
    shared: Arc<Shared>,
    settings: Settings,
    /// Since when, and after how many failed attempts, the receiver has
    /// been failing.
    outage: Option<(Instant, u64)>,
    refusals: u64,
}

/// `d` scaled by a factor in [0.8, 1.2), so a fleet that lost its
/// receiver at once does not retry in step.
fn jitter(d: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d.mul_f64(0.8 + 0.4 * f64::from(nanos % 1000) / 1000.0)
}

impl Worker {
    fn run(mut self) {
        while let Ok(p) = self.rx.recv() {
            self.deliver(p);
        }
    }

    /// Tries until sent, refused, or out of time at exit.
    fn deliver(&mut self, p: Payload) {
        let mut backoff = BACKOFF_MIN;
        loop {
            let flush_by = self.shared.flush_by();
            let timeout = match flush_by {
                Some(by) => {
                    let left = by.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        let mut t = self.shared.totals();
                        t.unsent += 1;
                        t.unsent_samples += p.samples;
                        return;
                    }
                    left.min(self.settings.timeout)
                }
                None => self.settings.timeout,
            };
            let endpoint = &self.settings.endpoint;
            // The clients' panics on a server's answer are fenced: they cost
            // this profile, not bprof.
            let transport = &mut self.transport;
            let gzip = self.settings.gzip;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                transport.export(&p.body, gzip, timeout)
            }))
            .unwrap_or_else(|_| Err(Failure::refused("the client failed on the answer")));
            match result {
                Ok(answer) => {
                    {
                        let mut t = self.shared.totals();
                        t.sent += 1;
                        t.sent_samples += p.samples;
                        t.sent_bytes += p.body.len() as u64;
                        t.rejected_by_receiver += answer.rejected;
                    }
                    if answer.rejected > 0 {
                        eprintln!(
                            "bprof: the OTLP receiver at {endpoint} took profile {} but rejected {} of its profiles: {}",
                            p.number, answer.rejected, answer.message
                        );
                    }
                    if let Some((since, failed)) = self.outage.take() {
                        eprintln!(
                            "bprof: OTLP export to {endpoint} works again, after {failed} failed attempts over {:.0} s",
                            since.elapsed().as_secs_f64()
                        );
                    }
                    return;
                }
                Err(f) if f.retryable => {
                    self.shared.totals().retried += 1;
                    match &mut self.outage {
                        None => {
                            eprintln!(
                                "bprof: OTLP export to {endpoint} failed: {}; retrying (up to {} profiles wait, then the oldest are dropped)",
                                f.why, self.settings.queue
                            );
                            self.outage = Some((Instant::now(), 1));
                        }
                        Some((_, n)) => {
                            *n += 1;
                            if self.settings.verbose {
                                eprintln!(
                                    "bprof: OTLP export to {endpoint} failed again: {}",
                                    f.why
                                );
                            }
                        }
                    }
                    let wait = jitter(f.retry_after.unwrap_or(backoff));
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    match flush_by {
                        Some(by) => std::thread::sleep(
                            wait.min(FLUSH_BACKOFF)
                                .min(by.saturating_duration_since(Instant::now())),
                        ),
                        // Woken early by finish (the stop sender dropped).
                        None => {
                            let _ = self.stop.recv_timeout(wait);
                        }
                    }
                }
                Err(f) => {
                    {
                        let mut t = self.shared.totals();
                        t.refused += 1;
                        t.refused_samples += p.samples;
                    }
                    self.refusals += 1;
                    if self.refusals <= SAID_REFUSALS {
                        eprintln!(
                            "bprof: the OTLP receiver at {endpoint} refused profile {}: {}{}",
                            p.number,
                            f.why,
                            if self.refusals == SAID_REFUSALS {
                                " (further refusals are only counted)"
                            } else {
                                ""
                            }
                        );
                    }
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::transport::Accepted;
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A receiver that answers from a script: down for the first `down`
    /// attempts, refusing bodies starting with `b'R'`, each attempt
    /// taking `delay`.
    struct Scripted {
        down: u64,
        delay: Duration,
        attempts: Arc<AtomicU64>,
    }

    impl Transport for Scripted {
        fn export(&mut self, body: &[u8], _: bool, timeout: Duration) -> Result<Accepted, Failure> {
            let n = self.attempts.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.delay.min(timeout));
            if self.delay > timeout {
                return Err(Failure::retry("timed out"));
            }
            if n < self.down {
                return Err(Failure::retry("connection refused"));
            }
            if body.first() == Some(&b'R') {
                return Err(Failure::refused("HTTP 400"));
            }
            Ok(Accepted::default())
        }
    }

    fn settings(queue: usize) -> Settings {
        Settings {
            endpoint: super::super::endpoint::parse("http://127.0.0.1:9").unwrap(),
            headers: Vec::new(),
            gzip: false,
            queue,
            timeout: Duration::from_secs(5),
            verbose: false,
        }
    }

    fn payload(first: u8, n: u64) -> Payload {
        Payload {
            body: vec![first; 4],
            samples: 10,
            number: n,
        }
    }

    #[test]
    fn every_profile_is_accounted_for() {
        let attempts = Arc::new(AtomicU64::new(0));
        let t = Scripted {
            down: 1,
            delay: Duration::ZERO,
            attempts: Arc::clone(&attempts),
        };
        let mut d = Delivery::with_transport(settings(8), Box::new(t)).unwrap();
        d.push(payload(b'A', 1));
        d.push(payload(b'R', 2));
        d.push(payload(b'A', 3));
        let t = d.finish(Duration::from_secs(20));
        assert_eq!(
            (t.queued, t.sent, t.refused, t.dropped, t.unsent),
            (3, 2, 1, 0, 0)
        );
        assert_eq!(t.retried, 1);
        assert_eq!(t.sent_samples + t.refused_samples, 30);
    }

    #[test]
    fn a_full_queue_drops_the_oldest_and_push_never_waits() {
        let attempts = Arc::new(AtomicU64::new(0));
        let t = Scripted {
            down: u64::MAX,
            delay: Duration::from_millis(50),
            attempts,
        };
        let mut d = Delivery::with_transport(settings(2), Box::new(t)).unwrap();
        let start = Instant::now();
        for n in 1..=10 {
            d.push(payload(b'A', n));
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        let t = d.finish(Duration::from_millis(300));
        assert_eq!(t.queued, 10);
        assert_eq!(t.sent, 0);
        // Two wait, one may be in flight: the rest were dropped.
        assert!(t.dropped >= 7, "{t:?}");
        assert_eq!(t.dropped + t.unsent, 10, "{t:?}");
        assert_eq!(t.dropped_samples + t.unsent_samples, 100);
    }
}
