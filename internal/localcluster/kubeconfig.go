package localcluster

import (
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminRESTConfig is the cluster admin's client configuration for the
// kube-apiserver at server.
func adminRESTConfig(server string, pki *pki) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData: pki.ca.certPEM, CertData: pki.admin.certPEM, KeyData: pki.admin.keyPEM,
		},
		QPS: 200, Burst: 400, // a test cluster: no need for client-side throttling
	}
}

// writeKubeconfigs writes Dir/<name>.kubeconfig for the admin and each
// component that is a client of the kube-apiserver, and sets c.Kubeconfig.
func (c *Cluster) writeKubeconfigs(server string, pki *pki) error {
	kubeconfigs := map[string]*keyPair{"admin": pki.admin, ControllerManager: pki.kcm, Scheduler: pki.scheduler, Kwok: pki.kwok}
	for name, kp := range kubeconfigs {
		if err := writeKubeconfig(filepath.Join(c.Dir, name+".kubeconfig"), server, pki.ca, kp); err != nil {
			return err
		}
	}
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	return nil
}

// writeKubeconfig writes a kubeconfig with embedded CA and client certificate.
func writeKubeconfig(path, server string, ca, client *keyPair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca.certPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: client.certPEM, ClientKeyData: client.keyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}
