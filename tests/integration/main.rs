//! Integration tests against the real control plane started by `make test` (e2e/cluster.sh).
//! One binary, so the kube client stack links once; each test works in its own namespace.

mod support;

mod applier;
mod chaos;
mod cold_apply;
mod controller;
mod differential;
mod drift;
mod dropin;
mod events;
mod failover;
mod flux_build_cli;
mod flux_cli;
mod flux_gaps;
mod flux_gitops;
mod flux_oci;
mod foundation;
mod handover;
mod health;
mod health_parking;
mod hostile_input;
mod identity;
mod outage;
mod remote_bases;
mod revision;
mod sharding;
mod ship;
mod shutdown;
mod soak;
mod sops;
mod source;
mod tenancy_finalize;
mod tenancy_health;
mod tenancy_install;
mod tenancy_kubeconfig;
mod tenancy_lockdown;
mod tenancy_remote;
