package plugin

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// connect returns a client for the kubeconfig's cluster and the namespace of
// its context ("default" if it names none), as kubectl reads them.
func (c *common) connect() (client.Client, string, error) {
	cl, _, ns, err := c.connectDynamic()
	return cl, ns, err
}

// connectDynamic is connect plus a dynamic client, which writes objects
// the way the operator's Applier does.
func (c *common) connectDynamic() (client.Client, dynamic.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.kubeconfig != "" {
		rules.ExplicitPath = c.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, nil, "", err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, "", err
	}
	if err := webappv1.AddToScheme(scheme); err != nil {
		return nil, nil, "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, "", err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	return cl, dyn, ns, err
}
