//! Who a controller is, in every name the runtime writes for it: log fields, metric labels and
//! names, events, status writes, its Lease. Each controller passes its own, so nothing here is
//! hard-wired to one kind and one process could run two controllers.

/// A controller's names, Flux's spelling: alerts, dashboards and `flux` match on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerIdentity {
    /// controller-runtime's name of the controller (`kustomization`): the `controller` label of
    /// its metrics and the `controller` field of its log lines.
    pub controller: &'static str,
    /// The API group of the kind it reconciles (`kustomize.toolkit.fluxcd.io`).
    pub group: &'static str,
    /// The kind it reconciles (`Kustomization`).
    pub kind: &'static str,
    /// The Flux component (`kustomize-controller`): its events' reporting controller, the
    /// start of its Lease's name, its instance name outside a cluster.
    pub component: &'static str,
    /// The prefix of the metrics that are its own, not Flux's (`kustomize_controller`).
    pub metrics_prefix: &'static str,
    /// The field manager of its status writes (`gotk-kustomize-controller`).
    pub field_manager: &'static str,
}

#[cfg(test)]
pub(crate) mod testing {
    use super::ControllerIdentity;

    /// The kustomize controller's names, which the runtime's tests check its output against.
    pub(crate) const KUSTOMIZATION: ControllerIdentity = ControllerIdentity {
        controller: "kustomization",
        group: "kustomize.toolkit.fluxcd.io",
        kind: "Kustomization",
        component: "kustomize-controller",
        metrics_prefix: "kustomize_controller",
        field_manager: "gotk-kustomize-controller",
    };

    /// Another controller's names, to show they are not the kustomize controller's.
    pub(crate) const IMAGE_REPOSITORY: ControllerIdentity = ControllerIdentity {
        controller: "imagerepository",
        group: "image.toolkit.fluxcd.io",
        kind: "ImageRepository",
        component: "image-reflector-controller",
        metrics_prefix: "image_reflector_controller",
        field_manager: "image-reflector-controller",
    };
}
