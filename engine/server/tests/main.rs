//! The engine server in-process, in one test binary: the compute thread on the embedded
//! model with tasks posted on its channel (the order of a generation's events,
//! cancellation, the error classes), and the router through `tower::ServiceExt::oneshot`
//! for every error mapping of both surfaces. Nothing binds a port.

mod cancel_storm;
mod compute;
mod router;
mod support;
