// Command cxlkv-fakekubelet plays the node side of one fake node with the
// kubelet's own code and no kubelet: kubelet's plugin manager
// (pkg/kubelet/pluginmanager) watches a registration directory and hands DRA
// plugins to kubelet's DRA manager (pkg/kubelet/cm/dra), exactly as kubelet
// wires them. For every pod bound to its node it calls the DRA manager's
// PrepareResources (kubelet's gRPC client, kubelet's retries and checks),
// resolves the containers' CDI device ids with the reference CDI library
// (tags.cncf.io/container-device-interface), and starts each container as a
// process in a private mount namespace with the CDI environment and mounts
// applied. When a pod is deleted it stops the processes, calls
// UnprepareResources and removes the pod, as kubelet finishes a termination.
// Test tooling only (the product has no Go code).
//
//	cxlkv-fakekubelet --kubeconfig admin.kubeconfig --node-name fake-node-0 \
//	    --root-dir /tmp/n0/kubelet --cdi-dir /tmp/n0/cdi --log-dir /tmp/n0/logs
//
// `cxlkv-fakekubelet call ...` makes one DRA call instead (call.go).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// The environment variable that carries a container's spec into the
// re-executed helper (see runContainer).
const containerSpecEnv = "_CXLKV_FAKEKUBELET_CONTAINER"

type containerSpec struct {
	Args   []string    `json:"args"`
	Env    []string    `json:"env"`
	Mounts []oci.Mount `json:"mounts"`
	Dir    string      `json:"dir,omitempty"`
	Exec   string      `json:"exec,omitempty"`  // the file to execute ("" = Args[0] on PATH)
	Tmpfs  []string    `json:"tmpfs,omitempty"` // fresh tmpfs mounts, before the bind mounts
	// Env is the whole environment (not added to the test kubelet's own).
	CleanEnv bool `json:"cleanEnv,omitempty"`
}

type node struct {
	name    string
	cs      kubernetes.Interface
	mgr     *dra.Manager
	cdiDir  string
	rootDir string
	logDir  string
	retry   time.Duration
	mu      sync.Mutex
	pods    map[string]*podRun // by pod UID
	stopped bool
}

type podRun struct {
	pod     *corev1.Pod
	wake    chan struct{}
	deleted bool
	procs   []*exec.Cmd
	exited  chan struct{} // closed once every container process has been reaped
}

func main() {
	if os.Getenv(containerSpecEnv) != "" {
		runContainer()
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "call" {
		os.Exit(callMain(os.Args[2:]))
	}
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	nodeName := flag.String("node-name", "", "the fake node this kubelet plays")
	rootDir := flag.String("root-dir", "", "kubelet root dir: plugins_registry/ is watched, dra state is kept")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "CDI spec directory")
	logDir := flag.String("log-dir", "", "container stdout/stderr: <log-dir>/<ns>_<pod>_<container>.log")
	retry := flag.Duration("retry", 2*time.Second, "delay before retrying a failed PrepareResources")
	klog.InitFlags(nil)
	flag.Parse()
	if *nodeName == "" || *rootDir == "" || *logDir == "" {
		log.Fatal("cxlkv-fakekubelet: --node-name, --root-dir and --log-dir are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	logger := klog.Background().WithValues("node", *nodeName)
	ctx = klog.NewContext(ctx, logger)

	for _, d := range []string{*rootDir + "/plugins_registry", *rootDir + "/dra", *logDir, *cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			log.Fatalf("mkdir %s: %v", d, err)
		}
	}
	mgr, err := dra.NewManager(logger, cs, *rootDir+"/dra")
	if err != nil {
		log.Fatalf("dra manager: %v", err)
	}
	n := &node{name: *nodeName, cs: cs, mgr: mgr, cdiDir: *cdiDir, rootDir: *rootDir, logDir: *logDir,
		retry: *retry, pods: map[string]*podRun{}}
	if err := setNodeAddresses(ctx, cs, *nodeName); err != nil {
		log.Fatalf("node addresses: %v", err)
	}
	// As kubelet's: ready once the API pod source has delivered its first
	// list. Before that, activePods() is not the truth, and the DRA manager's
	// reconcile would unprepare claims of running pods (after a restart).
	var podsSynced atomic.Bool
	sourcesReady := config.NewSourcesReady(func(sets.Set[string]) bool { return podsSynced.Load() })
	getNode := func(ctx context.Context) (*corev1.Node, error) {
		return cs.CoreV1().Nodes().Get(ctx, *nodeName, metav1.GetOptions{})
	}
	if err := mgr.Start(ctx, n.activePods, getNode, sourcesReady); err != nil {
		log.Fatalf("dra manager start: %v", err)
	}
	// Wired as kubelet.go wires them: the plugin manager owns the registry
	// directory, the DRA manager is its handler for "DRAPlugin".
	pm := pluginmanager.NewPluginManager(*rootDir+"/plugins_registry", &record.FakeRecorder{})
	pm.AddHandler(registerapi.DRAPlugin, pluginHandler(mgr.GetWatcherHandler()))
	go pm.Run(ctx, sourcesReady, ctx.Done())

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", *nodeName).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { n.observe(ctx, o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { n.observe(ctx, o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				n.observe(ctx, p, true)
			}
		},
	})
	if err != nil {
		log.Fatalf("pod informer: %v", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		log.Fatal("pod informer did not sync")
	}
	podsSynced.Store(true)
	log.Printf("cxlkv-fakekubelet %s: watching %s/plugins_registry", *nodeName, *rootDir)
	if err := os.WriteFile(*rootDir+"/ready", []byte("ok\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	n.mu.Lock()
	n.stopped = true
	for _, r := range n.pods {
		for _, p := range r.procs {
			if p.Process != nil {
				_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			}
		}
	}
	n.mu.Unlock()
	mgr.Stop()
}

// activePods is what kubelet's DRA manager reconciles against every 60 s:
// every pod this node still runs or is still tearing down.
func (n *node) activePods() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(n.pods))
	for _, r := range n.pods {
		out = append(out, r.pod)
	}
	return out
}

func (n *node) observe(ctx context.Context, pod *corev1.Pod, deleted bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	uid := string(pod.UID)
	r, ok := n.pods[uid]
	if !ok {
		if deleted || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return
		}
		r = &podRun{pod: pod.DeepCopy(), wake: make(chan struct{}, 1)}
		n.pods[uid] = r
		go n.run(ctx, r)
	}
	if !deleted {
		r.pod = pod.DeepCopy()
	}
	r.deleted = r.deleted || deleted || pod.DeletionTimestamp != nil
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run is one pod's life on this node: prepare (retried), start, wait for
// deletion, stop, unprepare (retried), remove the pod object.
func (n *node) run(ctx context.Context, r *podRun) {
	logger := klog.FromContext(ctx)
	started := false
	for {
		n.mu.Lock()
		pod, deleted := r.pod, r.deleted
		n.mu.Unlock()
		if deleted {
			break
		}
		if !started {
			t0 := time.Now()
			err := n.mgr.PrepareResources(ctx, pod)
			if err == nil {
				err = n.start(ctx, r, pod)
			}
			if err != nil {
				logger.Info("pod not started, will retry", "pod", klog.KObj(pod), "err", err)
				n.setWaiting(ctx, pod, err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(n.retry):
				case <-r.wake:
				}
				continue
			}
			started = true
			n.startProbes(ctx, r, pod)
			logger.Info("pod started", "pod", klog.KObj(pod), "prepare+start", time.Since(t0))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
	}
	n.mu.Lock()
	procs, pod, exited := r.procs, r.pod, r.exited
	n.mu.Unlock()
	n.stopProbes(string(pod.UID))
	// The whole process group, as a runtime stops every process of a container.
	for _, p := range procs {
		if p.Process != nil {
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		}
	}
	if exited != nil {
		<-exited
	}
	for {
		err := n.mgr.UnprepareResources(ctx, pod)
		if err == nil {
			break
		}
		logger.Info("unprepare failed, will retry", "pod", klog.KObj(pod), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(n.retry):
		}
	}
	// Kubelet deletes the pod object once the containers are gone.
	zero := int64(0)
	err := n.cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		logger.Info("delete pod", "pod", klog.KObj(pod), "err", err)
	}
	n.mu.Lock()
	delete(n.pods, string(pod.UID))
	n.mu.Unlock()
	logger.Info("pod torn down", "pod", klog.KObj(pod))
}

// start resolves each container's CDI devices and starts it.
func (n *node) start(ctx context.Context, r *podRun, pod *corev1.Pod) error {
	reg, err := cdi.NewCache(cdi.WithSpecDirs(n.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI cache %s: %w", n.cdiDir, err)
	}
	if errs := reg.GetErrors(); len(errs) > 0 {
		return fmt.Errorf("CDI specs in %s: %v", n.cdiDir, errs)
	}
	var procs []*exec.Cmd
	var statuses []corev1.ContainerStatus
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		info, err := n.mgr.GetResources(pod, c)
		if err != nil {
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
		var names []string
		for _, d := range info.CDIDevices {
			names = append(names, d.Name)
		}
		spec := &oci.Spec{Process: &oci.Process{}}
		if len(names) > 0 {
			if unresolved, err := reg.InjectDevices(spec, names...); err != nil {
				return fmt.Errorf("container %s: unresolvable CDI devices %v: %w", c.Name, unresolved, err)
			}
		}
		if err := checkProbes(c); err != nil {
			return err
		}
		cspec, err := n.containerSpecFor(ctx, pod, c, spec.Mounts, spec.Process.Env)
		if err != nil {
			return fmt.Errorf("container %s: %w", c.Name, err)
		}
		blob, _ := json.Marshal(cspec)
		logPath := filepath.Join(n.logDir, fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, c.Name))
		out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		self, _ := os.Executable()
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), containerSpecEnv+"="+string(blob))
		cmd.Stdout, cmd.Stderr = out, out
		// A private mount namespace per container, as a runtime gives one.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Setpgid: true}
		if err := cmd.Start(); err != nil {
			out.Close()
			for _, p := range procs {
				_ = p.Process.Kill()
				_ = p.Wait()
			}
			return fmt.Errorf("container %s: start: %w", c.Name, err)
		}
		out.Close()
		procs = append(procs, cmd)
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Ready: true, Started: ptrBool(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	n.mu.Lock()
	r.procs = procs
	r.exited = make(chan struct{})
	n.mu.Unlock()
	n.setStatus(ctx, pod, corev1.PodRunning, statuses)
	go n.waitExit(ctx, r, pod, procs)
	return nil
}

func ptrBool(b bool) *bool { return &b }

// waitExit records the containers' exit in the pod status.
func (n *node) waitExit(ctx context.Context, r *podRun, pod *corev1.Pod, procs []*exec.Cmd) {
	defer close(r.exited)
	phase := corev1.PodSucceeded
	var statuses []corev1.ContainerStatus
	for i, p := range procs {
		err := p.Wait()
		code := 0
		if err != nil {
			code = 1
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			phase = corev1.PodFailed
		}
		statuses = append(statuses, corev1.ContainerStatus{Name: pod.Spec.Containers[i].Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: int32(code), FinishedAt: metav1.Now()}}})
	}
	n.mu.Lock()
	deleted := r.deleted || n.stopped
	n.mu.Unlock()
	if !deleted {
		n.setStatus(ctx, pod, phase, statuses)
	}
}

func (n *node) setWaiting(ctx context.Context, pod *corev1.Pod, cause error) {
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "FailedPrepareDynamicResources", Message: cause.Error()}}})
	}
	n.setStatus(ctx, pod, corev1.PodPending, statuses)
}

func (n *node) setStatus(ctx context.Context, pod *corev1.Pod, phase corev1.PodPhase, cs []corev1.ContainerStatus) {
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := n.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || cur.UID != pod.UID {
			return
		}
		cur.Status.Phase = phase
		cur.Status.ContainerStatuses = cs
		fillStatus(cur)
		if _, err = n.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err == nil ||
			!apierrors.IsConflict(err) {
			return
		}
	}
}

// runContainer is the container's first process, already in its own mount
// namespace: make every mount private (nothing leaks to the host), apply the
// CDI bind mounts, then exec the command with the CDI environment.
func runContainer() {
	var spec containerSpec
	if err := json.Unmarshal([]byte(os.Getenv(containerSpecEnv)), &spec); err != nil {
		log.Fatalf("container spec: %v", err)
	}
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		log.Fatalf("make / private: %v", err)
	}
	for _, d := range spec.Tmpfs {
		if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=755"); err != nil {
			log.Fatalf("tmpfs on %s: %v", d, err)
		}
	}
	for _, m := range spec.Mounts {
		bind, ro := false, false
		for _, o := range m.Options {
			bind = bind || o == "bind" || o == "rbind"
			ro = ro || o == "ro"
		}
		if !bind {
			log.Fatalf("mount %s: only bind mounts are supported", m.Destination)
		}
		st, err := os.Stat(m.Source)
		if err != nil {
			log.Fatalf("mount %s: %v", m.Source, err)
		}
		if err := os.MkdirAll(filepath.Dir(m.Destination), 0o755); err != nil {
			log.Fatal(err)
		}
		if st.IsDir() {
			err = os.MkdirAll(m.Destination, 0o755)
		} else if _, e := os.Stat(m.Destination); os.IsNotExist(e) {
			var f *os.File
			if f, err = os.Create(m.Destination); err == nil {
				f.Close()
			}
		}
		if err != nil {
			log.Fatalf("mount point %s: %v", m.Destination, err)
		}
		if err := syscall.Mount(m.Source, m.Destination, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			log.Fatalf("bind %s on %s: %v", m.Source, m.Destination, err)
		}
		if ro {
			if err := syscall.Mount("", m.Destination, "", syscall.MS_BIND|syscall.MS_REMOUNT|syscall.MS_RDONLY,
				""); err != nil {
				log.Fatalf("read-only %s: %v", m.Destination, err)
			}
		}
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if spec.CleanEnv {
			break
		}
		if len(kv) < len(containerSpecEnv) || kv[:len(containerSpecEnv)] != containerSpecEnv {
			env = append(env, kv)
		}
	}
	env = append(env, spec.Env...)
	path := spec.Exec
	if path == "" {
		var err error
		if path, err = exec.LookPath(spec.Args[0]); err != nil {
			log.Fatalf("command %s: %v", spec.Args[0], err)
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			log.Fatal(err)
		}
	}
	log.Fatal(syscall.Exec(path, spec.Args, env))
}
