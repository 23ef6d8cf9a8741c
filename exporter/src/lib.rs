//! Sidecar exporter (being built).
