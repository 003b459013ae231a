//! Built-in kinds beyond ConfigMaps and Deployments, each leaving out fields whose zero value
//! Flux's typed round trip writes (and so owns): a StatefulSet's update strategy and claim
//! template status, a probe's gRPC service, a resource field's divisor, a CronJob's job
//! template metadata, a NetworkPolicy's pod selector, a PodDisruptionBudget's nothing.

use super::{Scenario, apply, tree};

const OBJECTS: &[&str] = &[
    "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  serviceName: db\n  replicas: 0\n  \
     selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      \
     containers:\n      - name: db\n        image: registry.invalid/db:1\n        readinessProbe:\n          grpc: {port: 9}\n        \
     env:\n        - name: CPU\n          valueFrom:\n            resourceFieldRef: {resource: limits.cpu}\n  \
     volumeClaimTemplates:\n  - metadata:\n      name: data\n    spec:\n      accessModes: [ReadWriteOnce]\n      \
     resources: {requests: {storage: 1Gi}}\n",
    "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\nspec:\n  schedule: \"0 3 * * *\"\n  suspend: true\n  \
     jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          \
     containers:\n          - {name: job, image: \"registry.invalid/job:1\"}\n",
    "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: web\nspec:\n  rules:\n  - http:\n      \
     paths:\n      - path: /\n        pathType: Prefix\n        backend:\n          service: {name: web, port: {number: 80}}\n",
    "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: deny\nspec:\n  policyTypes: [Ingress]\n",
    "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: db\nspec:\n  minAvailable: 1\n  \
     selector:\n    matchLabels: {app: db}\n",
];

pub(super) fn scenarios() -> Vec<Scenario> {
    vec![Scenario {
        name: "native-kinds",
        files: tree(&OBJECTS.iter().map(|o| o.to_string()).collect::<Vec<_>>()),
        setup: vec![],
        steps: vec![apply("app", serde_json::json!({}))],
    }]
}
