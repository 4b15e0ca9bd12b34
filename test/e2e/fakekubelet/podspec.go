// Running a pod from its whole spec, as kubelet would (what the Helm chart's
// DaemonSet and Deployment pods need): command and args with $(VAR)
// expansion, env from values, the downward API (fieldRef), Secrets and
// ConfigMaps, volume mounts (hostPath, the projected service-account token,
// emptyDir, secret, configMap), the pod's IP and the node's InternalIP.
//
// Enabled by --node-root. The fake node's host file system is then a
// directory: every hostPath (and kubelet's own --root-dir and --cdi-dir,
// which the caller points there) lives under <node-root>, except the paths
// named by --shared-host-path (the fabric's memory, which every node sees
// as the same files). Two stand-ins, named:
//   - images are not run: --image REPO=DIR executes a container's absolute
//     command from DIR (the image's /usr/bin/cxlkv-hostd is DIR/cxlkv-hostd),
//     and the container's file system is the host's with a fresh tmpfs on
//     /run and /var (its own writable state, so mount points never touch
//     the host's);
//   - the pod network is the host's loopback: a pod gets its own address
//     <--pod-ip-prefix>N, a hostNetwork pod the node's --node-ip; there is
//     no network isolation. KUBERNETES_SERVICE_HOST/PORT is the apiserver's
//     own address (--apiserver-endpoint), where kube-proxy would send the
//     kubernetes Service's ClusterIP.
//
// Without --node-root the older, narrower behaviour holds: command, args,
// env and CDI devices only; volumes are ignored.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/fieldpath"
	pmcache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"

	oci "github.com/opencontainers/runtime-spec/specs-go"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

var (
	nodeRoot = flag.String("node-root", "",
		"run pods from their whole spec; the node's host file system is this directory (see podspec.go)")
	nodeIP      = flag.String("node-ip", "", "the node's InternalIP, written to its status (status.hostIP of its pods)")
	podIPPrefix = flag.String("pod-ip-prefix", "", "pods get the addresses <prefix>1, <prefix>2, ... (e.g. 127.0.20.)")
	apiEndpoint = flag.String("apiserver-endpoint", "", "HOST:PORT put in KUBERNETES_SERVICE_HOST/PORT")
	sharedPaths stringList
	images      stringList
)

func init() {
	flag.Var(&sharedPaths, "shared-host-path", "a host path every node sees as itself (repeatable)")
	flag.Var(&images, "image", "REPO=DIR: containers of image REPO[:tag] run their absolute command from DIR (repeatable)")
}

func fullSpec() bool { return *nodeRoot != "" }

// hostPath is where a path of the fake node's host file system is on this machine.
func hostPath(p string) string {
	if !fullSpec() {
		return p
	}
	p = filepath.Clean(p)
	for _, s := range sharedPaths {
		s = filepath.Clean(s)
		if p == s || strings.HasPrefix(p, s+"/") {
			return p
		}
	}
	return filepath.Join(*nodeRoot, p)
}

// setNodeAddresses writes the node's InternalIP, as kubelet's --node-ip does.
func setNodeAddresses(ctx context.Context, cs kubernetes.Interface, name string) error {
	if *nodeIP == "" {
		return nil
	}
	if net.ParseIP(*nodeIP) == nil {
		return fmt.Errorf("--node-ip %q is not an IP address", *nodeIP)
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			node, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			node.Status.Addresses = []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: *nodeIP}, {Type: corev1.NodeHostName, Address: name}}
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			return err == nil, nil
		})
}

// endpointMapper hands kubelet's DRA manager the plugin's socket where it is
// on this machine: a plugin reports the path it sees in its container,
// which is the host path when hostPath and mountPath are equal (as the
// chart has them), so the same mapping as for hostPath volumes applies.
type endpointMapper struct{ inner pmcache.PluginHandler }

func (m endpointMapper) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	return m.inner.ValidatePlugin(ctx, name, hostPath(endpoint), versions)
}

func (m endpointMapper) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string,
	timeout *time.Duration) error {
	return m.inner.RegisterPlugin(ctx, name, hostPath(endpoint), versions, timeout)
}

func (m endpointMapper) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	m.inner.DeRegisterPlugin(ctx, name, hostPath(endpoint))
}

func pluginHandler(h pmcache.PluginHandler) pmcache.PluginHandler {
	if !fullSpec() {
		return h
	}
	return endpointMapper{h}
}

// Pod addresses, one per pod UID for the pod's life on this node.
var (
	ipMu   sync.Mutex
	ipNext = 1
	ipOf   = map[string]string{}
)

func podIP(pod *corev1.Pod) string {
	if pod.Spec.HostNetwork || *podIPPrefix == "" {
		return *nodeIP
	}
	ipMu.Lock()
	defer ipMu.Unlock()
	ip, ok := ipOf[string(pod.UID)]
	if !ok {
		ip = fmt.Sprintf("%s%d", *podIPPrefix, ipNext)
		ipNext++
		ipOf[string(pod.UID)] = ip
	}
	return ip
}

// fieldRefValue is the downward API's value of one field, as kubelet's
// podFieldSelectorRuntimeValue resolves it.
func fieldRefValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		if *nodeIP == "" {
			return "", fmt.Errorf("fieldRef %s: this node has no --node-ip", path)
		}
		return *nodeIP, nil
	case "status.podIP", "status.podIPs":
		ip := podIP(pod)
		if ip == "" {
			return "", fmt.Errorf("fieldRef %s: no --pod-ip-prefix or --node-ip", path)
		}
		return ip, nil
	}
	return fieldpath.ExtractFieldPathAsString(pod, path)
}

type specBuilder struct {
	ctx     context.Context
	cs      kubernetes.Interface
	rootDir string // kubelet's --root-dir, on this machine
	pod     *corev1.Pod
}

func (b *specBuilder) keyRef(kind, name, key string, optional *bool) (string, bool, error) {
	var data map[string]string
	switch kind {
	case "secret":
		s, err := b.cs.CoreV1().Secrets(b.pod.Namespace).Get(b.ctx, name, metav1.GetOptions{})
		if err == nil {
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
			for k, v := range s.StringData {
				data[k] = v
			}
		} else if optional == nil || !*optional {
			return "", false, fmt.Errorf("secret %s: %w", name, err)
		}
	default:
		c, err := b.cs.CoreV1().ConfigMaps(b.pod.Namespace).Get(b.ctx, name, metav1.GetOptions{})
		if err == nil {
			data = c.Data
		} else if optional == nil || !*optional {
			return "", false, fmt.Errorf("configmap %s: %w", name, err)
		}
	}
	v, ok := data[key]
	if !ok && data != nil && (optional == nil || !*optional) {
		return "", false, fmt.Errorf("%s %s has no key %s", kind, name, key)
	}
	return v, ok, nil
}

// env is the container's environment in kubelet's order: the apiserver's
// service variables, then the container's env list, each entry's $(VAR)
// references expanded against those before it.
func (b *specBuilder) env(c *corev1.Container) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var out []string
	set := func(k, v string) { vars[k] = v; out = append(out, k+"="+v) }
	if fullSpec() && *apiEndpoint != "" {
		host, port, err := net.SplitHostPort(*apiEndpoint)
		if err != nil {
			return nil, nil, fmt.Errorf("--apiserver-endpoint: %w", err)
		}
		set("KUBERNETES_SERVICE_HOST", host)
		set("KUBERNETES_SERVICE_PORT", port)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expansion.Expand(e.Value, expansion.MappingFuncFor(vars)))
			continue
		}
		var v string
		var err error
		ok := true
		switch f := e.ValueFrom; {
		case f.FieldRef != nil:
			v, err = fieldRefValue(b.pod, f.FieldRef.FieldPath)
		case f.SecretKeyRef != nil:
			v, ok, err = b.keyRef("secret", f.SecretKeyRef.Name, f.SecretKeyRef.Key, f.SecretKeyRef.Optional)
		case f.ConfigMapKeyRef != nil:
			v, ok, err = b.keyRef("configmap", f.ConfigMapKeyRef.Name, f.ConfigMapKeyRef.Key,
				f.ConfigMapKeyRef.Optional)
		default:
			err = fmt.Errorf("valueFrom is not supported by the test kubelet (only fieldRef, secretKeyRef, configMapKeyRef)")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	return out, vars, nil
}

// command is the container's argv with $(VAR) expanded, and the file to
// execute (the image stand-in).
func (b *specBuilder) command(c *corev1.Container, vars map[string]string) ([]string, string, error) {
	m := expansion.MappingFuncFor(vars)
	var argv []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		argv = append(argv, expansion.Expand(a, m))
	}
	if len(argv) == 0 {
		return nil, "", fmt.Errorf("no command (images are not run here)")
	}
	repo := c.Image
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	for _, im := range images {
		r, dir, ok := strings.Cut(im, "=")
		if ok && r == repo && filepath.IsAbs(argv[0]) {
			return argv, filepath.Join(dir, filepath.Base(argv[0])), nil
		}
	}
	return argv, "", nil
}

// volumeDir is where kubelet keeps a pod volume of its own making.
func (b *specBuilder) volumeDir(plugin, name string) string {
	return filepath.Join(b.rootDir, "pods", string(b.pod.UID), "volumes", plugin, name)
}

func writeFiles(dir string, files map[string]string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for p, v := range files {
		full := filepath.Join(dir, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(v), mode); err != nil {
			return err
		}
	}
	return nil
}

// projected writes a projected volume once, at start: the token is a real
// one from the TokenRequest API, bound to the pod (so it carries the node's
// name), as kubelet's token manager requests it. Not refreshed: its
// lifetime (an hour by default) is far past any test here.
func (b *specBuilder) projected(v *corev1.Volume) (string, error) {
	dir := b.volumeDir("kubernetes.io~projected", v.Name)
	files := map[string]string{}
	for _, src := range v.Projected.Sources {
		switch {
		case src.ServiceAccountToken != nil:
			t := src.ServiceAccountToken
			req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
				ExpirationSeconds: t.ExpirationSeconds,
				BoundObjectRef: &authenticationv1.BoundObjectReference{
					Kind: "Pod", APIVersion: "v1", Name: b.pod.Name, UID: b.pod.UID},
			}}
			if t.Audience != "" {
				req.Spec.Audiences = []string{t.Audience}
			}
			tr, err := b.cs.CoreV1().ServiceAccounts(b.pod.Namespace).CreateToken(b.ctx,
				b.pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
			if err != nil {
				return "", fmt.Errorf("volume %s: token for %s/%s: %w", v.Name, b.pod.Namespace,
					b.pod.Spec.ServiceAccountName, err)
			}
			files[t.Path] = tr.Status.Token
		case src.ConfigMap != nil:
			for _, it := range src.ConfigMap.Items {
				val, ok, err := b.keyRef("configmap", src.ConfigMap.Name, it.Key, src.ConfigMap.Optional)
				if err != nil {
					return "", fmt.Errorf("volume %s: %w", v.Name, err)
				}
				if ok {
					files[it.Path] = val
				}
			}
		case src.DownwardAPI != nil:
			for _, it := range src.DownwardAPI.Items {
				if it.FieldRef == nil {
					return "", fmt.Errorf("volume %s: only fieldRef items are supported", v.Name)
				}
				val, err := fieldRefValue(b.pod, it.FieldRef.FieldPath)
				if err != nil {
					return "", fmt.Errorf("volume %s: %w", v.Name, err)
				}
				files[it.Path] = val
			}
		default:
			return "", fmt.Errorf("volume %s: a projected source the test kubelet does not support", v.Name)
		}
	}
	return dir, writeFiles(dir, files, 0o644)
}

// hostPathVolume checks or creates the path as its type says.
func hostPathVolume(v *corev1.Volume) (string, error) {
	p := hostPath(v.HostPath.Path)
	t := corev1.HostPathUnset
	if v.HostPath.Type != nil {
		t = *v.HostPath.Type
	}
	st, err := os.Stat(p)
	switch t {
	case corev1.HostPathDirectoryOrCreate:
		if os.IsNotExist(err) {
			return p, os.MkdirAll(p, 0o755)
		}
	case corev1.HostPathFileOrCreate:
		if os.IsNotExist(err) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return "", err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return p, err
		}
	case corev1.HostPathDirectory:
		if err != nil || !st.IsDir() {
			return "", fmt.Errorf("hostPath %s (%s here) is not a directory", v.HostPath.Path, p)
		}
	case corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev:
		if err != nil {
			return "", fmt.Errorf("hostPath %s (%s here): %w", v.HostPath.Path, p, err)
		}
	}
	return p, nil
}

// mounts are the container's volume mounts as bind mounts of this machine's paths.
func (b *specBuilder) mounts(c *corev1.Container) ([]oci.Mount, error) {
	if !fullSpec() {
		return nil, nil
	}
	made := map[string]string{}
	var out []oci.Mount
	for _, vm := range c.VolumeMounts {
		var v *corev1.Volume
		for i := range b.pod.Spec.Volumes {
			if b.pod.Spec.Volumes[i].Name == vm.Name {
				v = &b.pod.Spec.Volumes[i]
			}
		}
		if v == nil {
			return nil, fmt.Errorf("volumeMount %s: no such volume", vm.Name)
		}
		src, ok := made[v.Name]
		if !ok {
			var err error
			switch {
			case v.HostPath != nil:
				src, err = hostPathVolume(v)
			case v.Projected != nil:
				src, err = b.projected(v)
			case v.EmptyDir != nil:
				src = b.volumeDir("kubernetes.io~empty-dir", v.Name)
				err = os.MkdirAll(src, 0o777)
			case v.Secret != nil, v.ConfigMap != nil:
				src, err = b.keyVolume(v)
			default:
				err = fmt.Errorf("a volume type the test kubelet does not support")
			}
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
			made[v.Name] = src
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, filepath.Clean("/"+vm.SubPath))
		}
		opts := []string{"rbind", "rw"}
		if vm.ReadOnly {
			opts = []string{"rbind", "ro"}
		}
		out = append(out, oci.Mount{Source: src, Destination: vm.MountPath, Options: opts})
	}
	return out, nil
}

func (b *specBuilder) keyVolume(v *corev1.Volume) (string, error) {
	kind, name, items, optional := "configmap", "", []corev1.KeyToPath(nil), (*bool)(nil)
	files := map[string]string{}
	if v.Secret != nil {
		kind, name, items, optional = "secret", v.Secret.SecretName, v.Secret.Items, v.Secret.Optional
		s, err := b.cs.CoreV1().Secrets(b.pod.Namespace).Get(b.ctx, name, metav1.GetOptions{})
		if err == nil && len(items) == 0 {
			for k, val := range s.Data {
				files[k] = string(val)
			}
		} else if err != nil && (optional == nil || !*optional) {
			return "", fmt.Errorf("secret %s: %w", name, err)
		}
	} else {
		name, items, optional = v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional
		c, err := b.cs.CoreV1().ConfigMaps(b.pod.Namespace).Get(b.ctx, name, metav1.GetOptions{})
		if err == nil && len(items) == 0 {
			for k, val := range c.Data {
				files[k] = val
			}
		} else if err != nil && (optional == nil || !*optional) {
			return "", fmt.Errorf("configmap %s: %w", name, err)
		}
	}
	for _, it := range items {
		val, ok, err := b.keyRef(kind, name, it.Key, optional)
		if err != nil {
			return "", err
		}
		if ok {
			files[it.Path] = val
		}
	}
	dir := b.volumeDir("kubernetes.io~"+kind, v.Name)
	return dir, writeFiles(dir, files, 0o644)
}

// containerSpecFor is what runContainer needs to start container c: its
// argv, the file to execute, its environment (the pod spec's, then the CDI
// devices'), its mounts (volumes, then the CDI devices' mounts).
func (n *node) containerSpecFor(ctx context.Context, pod *corev1.Pod, c *corev1.Container,
	cdiMounts []oci.Mount, cdiEnv []string) (containerSpec, error) {
	b := &specBuilder{ctx: ctx, cs: n.cs, rootDir: n.rootDir, pod: pod}
	env, vars, err := b.env(c)
	if err != nil {
		return containerSpec{}, err
	}
	argv, exe, err := b.command(c, vars)
	if err != nil {
		return containerSpec{}, err
	}
	mounts, err := b.mounts(c)
	if err != nil {
		return containerSpec{}, err
	}
	for _, m := range cdiMounts {
		m.Source = hostPath(m.Source)
		mounts = append(mounts, m)
	}
	env = append(env, cdiEnv...)
	env = append(env, "CXLKV_POD_NAME="+pod.Name, "CXLKV_NODE_NAME="+n.name)
	spec := containerSpec{Args: argv, Exec: exe, Env: env, Mounts: mounts, Dir: c.WorkingDir}
	if fullSpec() {
		// What a runtime gives: the image's PATH (Docker's default; images
		// are not run here) and the pod's hostname, then the spec's env;
		// nothing of the test kubelet's own environment (its KUBECONFIG
		// would stand in for the pod's token).
		spec.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"HOSTNAME=" + pod.Name}, env...)
		spec.CleanEnv = true
		spec.Tmpfs = []string{"/run", "/var"}
	}
	klog.FromContext(ctx).V(2).Info("container spec", "pod", klog.KObj(pod), "container", c.Name,
		"argv", argv, "exec", exe)
	return spec, nil
}
