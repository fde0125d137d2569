// Command kubeletfront is the kubelet endpoint of runbook's test nodes: it serves exec into a pod
// as a kubelet does and hands every other kubelet request (logs, healthz) to kwok behind it.
//
// kwok's own exec wraps a command's exit error, so the apiserver relays an InternalError where a
// real kubelet reports NonZeroExitCode with the code; a probe that exits 1 (pgrep finding nothing,
// curl timing out) then reads as a broken exec. Here the command's exit status goes back as a
// kubelet's container runtime returns it, through the same remotecommand server the kubelet uses.
//
// An exec runs the named tool from PATH (the tests' stand-in tools) with RUNBOOK_STANDIN_DIR,
// RUNBOOK_POD_NAMESPACE and RUNBOOK_POD_NAME set, so a tool knows which pod it was asked in.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's own defaults (--streaming-connection-idle-timeout, its stream creation timeout).
const (
	idleTimeout           = 4 * time.Hour
	streamCreationTimeout = 30 * time.Second
)

type podExecutor struct {
	standinDir string
}

// ExecInContainer runs cmd for the pod named "NAME/NAMESPACE" (as the exec handler below names it);
// an exit status other than 0 comes back as the ExitError the remotecommand server reports as
// NonZeroExitCode.
func (e podExecutor) ExecInContainer(ctx context.Context, name string, uid string, container string, cmd []string,
	in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	pod, namespace, _ := strings.Cut(name, "/")
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	run := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	run.Dir = e.standinDir
	run.Env = append(os.Environ(), "RUNBOOK_STANDIN_DIR="+e.standinDir, "RUNBOOK_POD_NAMESPACE="+namespace,
		"RUNBOOK_POD_NAME="+pod)
	if in != nil {
		run.Stdin = in
	}
	run.Stdout, run.Stderr = out, errOut
	err := run.Run()
	var exited *exec.ExitError
	if errors.As(err, &exited) && exited.ExitCode() >= 0 {
		return utilexec.CodeExitError{Err: err, Code: exited.ExitCode()}
	}
	if errors.Is(err, exec.ErrNotFound) {
		// As containerd words it when the image has no such binary.
		return fmt.Errorf("OCI runtime exec failed: exec failed: unable to start container process: exec: %q: executable file not found in $PATH: unknown", cmd[0])
	}
	return err
}

// serveExec answers /exec/NAMESPACE/POD/CONTAINER and /exec/NAMESPACE/POD/UID/CONTAINER, the
// paths the apiserver proxies pods/exec to.
func serveExec(executor podExecutor) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/exec/"), "/")
		var namespace, pod, uid, container string
		switch len(parts) {
		case 3:
			namespace, pod, container = parts[0], parts[1], parts[2]
		case 4:
			namespace, pod, uid, container = parts[0], parts[1], parts[2], parts[3]
		default:
			http.Error(w, "expected /exec/NAMESPACE/POD[/UID]/CONTAINER", http.StatusNotFound)
			return
		}
		options, err := remotecommand.NewOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		remotecommand.ServeExec(w, r, executor, pod+"/"+namespace, uid, container, r.URL.Query()["command"], options,
			idleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
	}
}

func main() {
	listen := flag.String("listen", "127.0.0.1:10250", "address to serve the kubelet endpoint on")
	kwok := flag.String("kwok", "", "kwok's own endpoint (https://HOST:PORT), for every request but exec")
	cert := flag.String("tls-cert-file", "", "serving certificate")
	key := flag.String("tls-private-key-file", "", "serving key")
	standinDir := flag.String("standin-dir", "", "the stand-in tools' answers (RUNBOOK_STANDIN_DIR)")
	flag.Parse()
	if *kwok == "" || *cert == "" || *key == "" || *standinDir == "" {
		log.Fatal("kubeletfront: --kwok, --tls-cert-file, --tls-private-key-file and --standin-dir are required")
	}
	behind, err := url.Parse(*kwok)
	if err != nil {
		log.Fatalf("kubeletfront: --kwok: %v", err)
	}
	toKwok := httputil.NewSingleHostReverseProxy(behind)
	// kwok serves the test PKI's kubelet certificate on loopback; this hop never leaves the machine.
	toKwok.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	toKwok.FlushInterval = -1 // follow=true logs stream as they are written

	mux := http.NewServeMux()
	mux.Handle("/exec/", serveExec(podExecutor{standinDir: *standinDir}))
	mux.Handle("/", toKwok)
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	log.Printf("kubeletfront: serving %s, the rest to %s", *listen, *kwok)
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
