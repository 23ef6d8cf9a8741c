//! Writer C ABI (being built).
