package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// keyPair is a certificate with its private key, both also PEM-encoded.
type keyPair struct {
	cert              *x509.Certificate
	key               *ecdsa.PrivateKey
	certPEM, keyPEM   []byte
	certFile, keyFile string
}

// pki holds every credential of one cluster. EC P-256 keys keep generation
// well under a second even on a loaded 2-core machine; RSA keys take many
// times longer.
type pki struct {
	ca        *keyPair
	apiserver *keyPair // serving cert of kube-apiserver
	serving   *keyPair // serving cert of controller-manager and scheduler
	admin     *keyPair
	kcm       *keyPair
	scheduler *keyPair
	kwok      *keyPair
	saKeyFile string // service-account signing key (private)
	saPubFile string // service-account verification key (public)
}

// newPKI generates the CA and all certificates and writes them to dir.
// apiserverIPs are more addresses of kube-apiserver's serving certificate
// (the real node's bridge, where it listens in ProfileNode).
func newPKI(dir string, apiserverIPs ...net.IP) (*pki, error) {
	ca, err := newCert(dir, "ca", nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "simplewebapp-local-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	})
	if err != nil {
		return nil, err
	}
	p := &pki{ca: ca}
	serving := func(name, cn string, ips []net.IP, dns ...string) (*keyPair, error) {
		return newCert(dir, name, ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    append([]string{"localhost"}, dns...),
			IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...),
		})
	}
	client := func(name, cn string, orgs ...string) (*keyPair, error) {
		return newCert(dir, name, ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn, Organization: orgs},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
	}
	// 10.0.0.1 is the first address of --service-cluster-ip-range: the
	// in-cluster "kubernetes" Service (data only; nothing listens there).
	if p.apiserver, err = serving("apiserver", "kube-apiserver", append([]net.IP{net.IPv4(10, 0, 0, 1)}, apiserverIPs...),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return nil, err
	}
	if p.serving, err = serving("serving", "localhost", nil); err != nil {
		return nil, err
	}
	if p.admin, err = client("admin", "admin", "system:masters"); err != nil {
		return nil, err
	}
	if p.kcm, err = client("controller-manager", "system:kube-controller-manager"); err != nil {
		return nil, err
	}
	if p.scheduler, err = client("scheduler", "system:kube-scheduler"); err != nil {
		return nil, err
	}
	// kwok patches node and pod status, deletes pods and renews node leases;
	// system:masters keeps that simple for a local test cluster.
	if p.kwok, err = client("kwok", "kwok", "system:masters"); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.saKeyFile = filepath.Join(dir, "sa.key")
	p.saPubFile = filepath.Join(dir, "sa.pub")
	keyDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.saKeyFile, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return nil, err
	}
	if err := writePEM(p.saPubFile, "PUBLIC KEY", pubDER, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

// nodePKI are the real node's credentials, signed by the cluster CA.
type nodePKI struct {
	caFile    string
	kubelet   *keyPair // client: the Node authorizer's system:node:<name> in system:nodes
	serving   *keyPair // kubelet's serving certificate for the node IP (metrics-server verifies it)
	kubeProxy *keyPair // client: system:kube-proxy, bound to system:node-proxier by default RBAC
}

// newNodePKI generates the real node's certificates into dir.
func newNodePKI(dir string, ca *keyPair) (*nodePKI, error) {
	np := &nodePKI{caFile: ca.certFile}
	var err error
	if np.kubelet, err = newCert(dir, "kubelet-client", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + RealNodeName, Organization: []string{"system:nodes"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	if np.serving, err = newCert(dir, "kubelet-serving", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: RealNodeName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{RealNodeName},
		IPAddresses: []net.IP{net.ParseIP(nodeIP)},
	}); err != nil {
		return nil, err
	}
	if np.kubeProxy, err = newCert(dir, "kube-proxy-client", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:kube-proxy"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	return np, nil
}

// The kube-apiserver proxies metrics.k8s.io to metrics-server (API
// aggregation): it authenticates itself with the front-proxy client
// certificate, and metrics-server takes the user from its request headers.
const frontProxyClientName = "front-proxy-client"

// metricsPKI are the credentials that only Options.Metrics needs.
type metricsPKI struct {
	frontProxyCA     *keyPair // signs frontProxyClient; metrics-server trusts it for request headers
	frontProxyClient *keyPair // the kube-apiserver's client certificate towards metrics-server
	serving          *keyPair // metrics-server's serving certificate
	client           *keyPair // metrics-server's identity towards the kube-apiserver
}

// newMetricsPKI generates the metricsPKI, metrics-server's certificates
// signed by the cluster CA ca, and writes them to dir.
func newMetricsPKI(dir string, ca *keyPair) (*metricsPKI, error) {
	m := &metricsPKI{}
	var err error
	// A CA of its own, as kubeadm does: a client certificate of the cluster CA
	// must not be able to pass as the front proxy.
	if m.frontProxyCA, err = newCert(dir, "front-proxy-ca", nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "simplewebapp-local-front-proxy-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}); err != nil {
		return nil, err
	}
	if m.frontProxyClient, err = newCert(dir, "front-proxy-client", m.frontProxyCA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: frontProxyClientName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	// The aggregator verifies the service's DNS name
	// (<service>.<namespace>.svc) against the APIService's caBundle.
	if m.serving, err = newCert(dir, "metrics-server", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: MetricsServer},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", MetricsServer + ".kube-system.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}); err != nil {
		return nil, err
	}
	// system:masters, like kwok: it reads nodes and pods, reviews tokens and
	// access, and reads the front-proxy CA from kube-system.
	if m.client, err = newCert(dir, "metrics-server-client", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: MetricsServer, Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	return m, nil
}

// apiserverArgs turn on API aggregation in the kube-apiserver.
func (m *metricsPKI) apiserverArgs() []string {
	return []string{
		"--requestheader-client-ca-file=" + m.frontProxyCA.certFile,
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + m.frontProxyClient.certFile,
		"--proxy-client-key-file=" + m.frontProxyClient.keyFile,
	}
}

// newCert creates a key and a certificate from tmpl, signed by parent (self-
// signed when parent is nil), and writes dir/name.crt and dir/name.key.
func newCert(dir, name string, parent *keyPair, tmpl *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	t := *tmpl
	t.SerialNumber = serial
	// Backdated a little so small clock differences never make it "not yet valid".
	t.NotBefore = time.Now().Add(-time.Hour)
	t.NotAfter = time.Now().Add(365 * 24 * time.Hour)
	signer, signerKey := &t, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, &t, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, fmt.Errorf("certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	kp := &keyPair{
		cert:     cert,
		key:      key,
		certPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:   pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		certFile: filepath.Join(dir, name+".crt"),
		keyFile:  filepath.Join(dir, name+".key"),
	}
	if err := os.WriteFile(kp.certFile, kp.certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(kp.keyFile, kp.keyPEM, 0o600); err != nil {
		return nil, err
	}
	return kp, nil
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// WriteServingCert writes a new CA and a serving certificate for 127.0.0.1
// and localhost signed by it into dir, as tls.crt and tls.key (the layout of
// a kubernetes.io/tls Secret, which controller-runtime's CertDir reads), and
// returns a pool with the CA so clients can verify the server.
func WriteServingCert(dir, commonName string) (*x509.CertPool, error) {
	ca, err := newCert(dir, "ca", nil, &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName + "-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	})
	if err != nil {
		return nil, err
	}
	if _, err := newCert(dir, "tls", ca, &x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool, nil
}
