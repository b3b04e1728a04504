// kubeside: what KubeRay v1.6.0 and the kubelet (Kubernetes v1.34) do to a rendered
// object's text before a container starts, computed by their own Go code.
//
// Reads one JSON request on stdin, writes one JSON answer on stdout:
//
//	{"expand": [{"text": "...", "env": {"K": "V"}}, ...]}
//	    -> {"expanded": ["...", ...]}: the kubelet's $(NAME) / $$ expansion of each text
//	{"container": {command, args, env}}
//	    -> {"command": [...], "args": [...], "env": {...}}: the container as the kubelet
//	       starts it (env values expanded in order over the ones before them, then command
//	       and args over the whole environment; valueFrom entries are left out)
//	{"rayjob": {...RayJob with status.dashboardURL and status.jobId...}}
//	    -> {"command": [...], "args": [...], "env": {...}}: the K8sJobMode submitter
//	       container KubeRay builds for it, after the kubelet's expansion
//
// Built by tests/support/kubeside.py against the module cache; nothing of either project is copied.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/common"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

type expandItem struct {
	Text string            `json:"text"`
	Env  map[string]string `json:"env"`
}

type request struct {
	Expand    []expandItem      `json:"expand"`
	Container *corev1.Container `json:"container"`
	RayJob    *rayv1.RayJob     `json:"rayjob"`
}

type started struct {
	Command []string          `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
}

// start: the kubelet's order (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables, then
// pkg/kubelet/container/helpers.go ExpandContainerCommandAndArgs).
func start(c *corev1.Container) started {
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue
		}
		v := e.Value
		if v != "" {
			v = expansion.Expand(v, expansion.MappingFuncFor(env))
		}
		env[e.Name] = v
	}
	out := started{Command: []string{}, Args: []string{}, Env: env}
	mapping := expansion.MappingFuncFor(env)
	for _, s := range c.Command {
		out.Command = append(out.Command, expansion.Expand(s, mapping))
	}
	for _, s := range c.Args {
		out.Args = append(out.Args, expansion.Expand(s, mapping))
	}
	return out
}

// submitter: ray-operator/controllers/ray/rayjob_controller.go configureSubmitterContainer
// for K8sJobMode with no command of our own (the toolkit's submitterPodTemplate sets none).
func submitter(rj *rayv1.RayJob) (started, error) {
	cmd, err := common.BuildJobSubmitCommand(rj, rayv1.K8sJobMode)
	if err != nil {
		return started{}, err
	}
	c := corev1.Container{
		Command: utils.GetContainerCommand([]string{"e"}),
		Args:    []string{strings.Join(cmd, " ")},
		Env: []corev1.EnvVar{
			{Name: "PYTHONUNBUFFERED", Value: "1"},
			{Name: utils.RAY_DASHBOARD_ADDRESS, Value: rj.Status.DashboardURL},
			{Name: utils.RAY_JOB_SUBMISSION_ID, Value: rj.Status.JobId},
		},
	}
	return start(&c), nil
}

func main() {
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "kubeside: bad request:", err)
		os.Exit(2)
	}
	var answer any
	switch {
	case req.Expand != nil:
		out := []string{}
		for _, it := range req.Expand {
			out = append(out, expansion.Expand(it.Text, expansion.MappingFuncFor(it.Env)))
		}
		answer = map[string][]string{"expanded": out}
	case req.Container != nil:
		answer = start(req.Container)
	case req.RayJob != nil:
		s, err := submitter(req.RayJob)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubeside:", err)
			os.Exit(1)
		}
		answer = s
	default:
		fmt.Fprintln(os.Stderr, "kubeside: give expand, container or rayjob")
		os.Exit(2)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answer); err != nil {
		fmt.Fprintln(os.Stderr, "kubeside:", err)
		os.Exit(1)
	}
}
