//! A firing's way out: slices are claimed, their firings staged, held on
//! the wheel and published at their instant.
//!
//! [`claim`] takes a time slice by compare-and-swap in the `chime-slices`
//! bucket; [`slicer`] claims slices ahead of time, stages their firings and
//! takes over stale claims; [`wheel`] holds staged firings in memory until
//! [`alarm`] wakes [`publisher`] at their instant, which publishes each on
//! `chime.fire.<group>.<band>`; [`duplicates`] checks a publish JetStream
//! answered as a duplicate; [`unstarted`] spares the publisher's marker the
//! firings it already saw start; [`immediate`] puts firings staged outside
//! any slice (triggers, retries, backfills, releases) on the wheel at once;
//! [`offers`] offers a broadcast job's firings, each addressed to one
//! worker, again until they start, and gives up on those whose worker is
//! gone.

pub mod alarm;
pub mod claim;
pub mod duplicates;
pub mod immediate;
pub mod message;
pub mod offers;
pub mod publisher;
pub mod slicer;
pub mod unstarted;
pub mod wheel;
