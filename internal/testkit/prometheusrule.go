package testkit

// PrometheusRuleSpec is the part of a PrometheusRule the tests read: each
// alert's name and annotations.
type PrometheusRuleSpec struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// AlertAnnotation returns the annotation key of every alert, by alert name.
func (s PrometheusRuleSpec) AlertAnnotation(key string) map[string]string {
	out := map[string]string{}
	for _, g := range s.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r.Annotations[key]
			}
		}
	}
	return out
}
