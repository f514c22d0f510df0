package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SimpleWebAppSpec is what the user asks for: a web app serving Message with
// Replicas pods, rendered from a version of a manifest channel.
type SimpleWebAppSpec struct {
	// Replicas is the desired number of web application pods.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Message is the text the web application serves. It is served as
	// text/plain, so HTML or script in it is shown, never executed.
	// +kubebuilder:default="Hello, Kubernetes Operator!"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="self.trim() != ''",message="message must contain a non-space character"
	// +optional
	Message string `json:"message,omitempty"`

	// Channel is the release channel to follow when Version is not set; the
	// newest version listed in the channel is applied.
	// +kubebuilder:default=stable
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]+$`
	// +optional
	Channel string `json:"channel,omitempty"`

	// Version pins an exact version (MAJOR.MINOR.PATCH) of the simplewebapp
	// package; it wins over Channel.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9a-z]+(\.[0-9a-z]+)*)?$`
	// +optional
	Version string `json:"version,omitempty"`

	// Image overrides the web server image of the package, for example to use
	// a mirror. It must serve the package's nginx configuration.
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`
	// +optional
	Image string `json:"image,omitempty"`

	// Autoscaling runs a HorizontalPodAutoscaler for the web server pods.
	// While it is set, the HPA owns the pod count and spec.replicas is not
	// applied; unset it to hand the count back to spec.replicas.
	// +optional
	Autoscaling *Autoscaling `json:"autoscaling,omitempty"`

	// UpgradeTimeout is how long a new version may take to become Ready. If
	// it does not, the operator rolls back to the last healthy version and
	// does not try that version again until the spec or the channel changes.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('5s') && duration(self) <= duration('24h')",message="upgradeTimeout must be between 5s and 24h"
	// +optional
	UpgradeTimeout *metav1.Duration `json:"upgradeTimeout,omitempty"`

	// Patches are kustomize patches applied to the rendered objects, after the
	// package's own mapping of this spec. A patch may only modify objects the
	// package renders for this SimpleWebApp; it cannot add, rename or move them.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Patches []Patch `json:"patches,omitempty"`

	// Suspend stops every write to the objects of this SimpleWebApp: hand
	// edits stay until it is set back to false, when they are reverted.
	// Status keeps reporting the running app (reason Suspended).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// Autoscaling bounds the pod count that a HorizontalPodAutoscaler sets from
// CPU utilisation.
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas must not exceed maxReplicas"
type Autoscaling struct {
	// MinReplicas is the fewest pods the autoscaler keeps.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the most pods the autoscaler creates.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MaxReplicas int32 `json:"maxReplicas"`

	// TargetCPUUtilizationPercentage is the average CPU use, in percent of
	// the pods' CPU request, that the autoscaler aims for.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetCPUUtilizationPercentage int32 `json:"targetCPUUtilizationPercentage,omitempty"`
}

// Patch is a kustomize patch of one kind of rendered object.
type Patch struct {
	// Target selects the rendered objects to patch, by kind and by the name
	// they have in the package (for example Deployment "web").
	Target PatchTarget `json:"target"`

	// Patch is a strategic merge patch (a partial object) or a JSON 6902 patch
	// (a list of operations), in YAML or JSON.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16384
	Patch string `json:"patch"`
}

// PatchTarget selects rendered objects. ConfigMaps are not patchable: their
// content comes from the spec and their names from a hash of it.
type PatchTarget struct {
	// Kind of the objects to patch.
	// +kubebuilder:validation:Enum=Deployment;Service
	Kind string `json:"kind"`

	// Name of the object in the package (a regular expression, as in
	// kustomize); empty selects every object of Kind.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// SimpleWebAppStatus is what the operator observed and applied.
type SimpleWebAppStatus struct {
	// ObservedGeneration is the newest generation the operator has processed,
	// whether it was applied or failed for good (then Stalled=True says why),
	// as kstatus expects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// AppliedGeneration is the newest generation whose objects were applied
	// successfully; it lags ObservedGeneration while a generation cannot be
	// applied and the last good objects keep running.
	// +optional
	AppliedGeneration int64 `json:"appliedGeneration,omitempty"`

	// LastHandledReconcileAt is the reconcile request last handled: the
	// value of the simplewebapp.example.com/reconcile-requested-at or the
	// reconcile.fluxcd.io/requestedAt annotation (when both are set, the
	// later time).
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// Conditions: Ready, Reconciling and Stalled, with kstatus semantics.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas is the number of web app pods that exist.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// PodsReady is ready/desired pods, for example "3/5" (a printer column).
	// +optional
	PodsReady string `json:"podsReady,omitempty"`

	// ReadyReplicas is the number of web app pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// UpdatedReplicas is the number of pods on the newest pod template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`

	// Selector is the label selector of the web app pods, in string form.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Channel that the applied version was resolved from (empty when pinned).
	// +optional
	Channel string `json:"channel,omitempty"`

	// Version of the package that is applied.
	// +optional
	Version string `json:"version,omitempty"`

	// LastHealthyVersion is the newest version that became Ready here; an
	// upgrade that fails is rolled back to it.
	// +optional
	LastHealthyVersion string `json:"lastHealthyVersion,omitempty"`

	// Upgrade is the roll-out of a new version that is not Ready yet.
	// +optional
	Upgrade *UpgradeStatus `json:"upgrade,omitempty"`

	// FailedUpgrade is the last version that did not become Ready in time and
	// was rolled back. It is not tried again while the spec (generation) and
	// the channel's content stay the same.
	// +optional
	FailedUpgrade *FailedUpgrade `json:"failedUpgrade,omitempty"`

	// Inventory lists the objects the operator applied for this SimpleWebApp
	// and has not pruned yet: what the last render holds, plus objects of an
	// earlier render that are deleted once the new one is Ready.
	// +listType=atomic
	// +optional
	Inventory []ObjectReference `json:"inventory,omitempty"`
}

// UpgradeStatus is a roll-out from one version to another in progress.
type UpgradeStatus struct {
	// From is the last healthy version, restored if the upgrade fails.
	From string `json:"from"`
	// To is the version being rolled out.
	To string `json:"to"`
	// StartedAt is when the new version was first applied.
	StartedAt metav1.Time `json:"startedAt"`
}

// FailedUpgrade records a version that was rolled back, and for which input.
type FailedUpgrade struct {
	// Version that did not become Ready.
	Version string `json:"version"`
	// Generation of the SimpleWebApp it was tried for.
	Generation int64 `json:"generation"`
	// ChannelRevision is a hash of the channel file it was resolved from
	// (empty for a pinned version).
	// +optional
	ChannelRevision string `json:"channelRevision,omitempty"`
	// Message says why it failed.
	Message string `json:"message"`
	// RolledBackAt is when the operator went back to the last healthy version.
	RolledBackAt metav1.Time `json:"rolledBackAt"`
}

// ObjectReference names one applied object in the SimpleWebApp's namespace.
type ObjectReference struct {
	// Group of the object's kind; empty for the core group.
	// +optional
	Group string `json:"group,omitempty"`
	// Kind of the object.
	Kind string `json:"kind"`
	// Name of the object.
	Name string `json:"name"`
}

// SimpleWebApp runs a web app that serves spec.message with spec.replicas pods.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=swa
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: rendered objects are named <name>-<object> and Service names are limited to 63"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (a lowercase letter first, then lowercase letters, digits and '-', no '.', ending with a letter or digit): the Service is named <name>-web"
// +kubebuilder:metadata:labels="applyset.kubernetes.io/is-parent-type=true"
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.podsReady`,description="Ready/desired pods"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Reason of the Ready condition"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,description="Applied package version"
// +kubebuilder:printcolumn:name="Channel",type=string,JSONPath=`.status.channel`,description="Channel the applied version came from (empty when spec.version pins it)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,description="Message of the Ready condition"
type SimpleWebApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	// +optional
	Spec   SimpleWebAppSpec   `json:"spec,omitempty"`
	Status SimpleWebAppStatus `json:"status,omitempty"`
}

// SimpleWebAppList is a list of SimpleWebApps.
// +kubebuilder:object:root=true
type SimpleWebAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimpleWebApp `json:"items"`
}
