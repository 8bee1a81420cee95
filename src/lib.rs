//! murmur-registry: the verified picture of which murmur capsules are running on this machine.
//!
//! - [`running`]: the records murmur leaves in `~/.murmur/running/` and the three layers that
//!   verify them. Knows nothing of HTTP.
pub mod running;
