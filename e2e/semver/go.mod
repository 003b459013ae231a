// The oracle for the ImagePolicy engine: the semver, tag-parsing, regexp and float behaviour
// of Flux's image-reflector-controller v1.2 (its go.mod pins these versions).
module kustomize-controller/e2e/semver

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/fluxcd/pkg/version v0.16.0
)
