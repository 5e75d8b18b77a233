package main

import (
	"time"

	"github.com/lockstep-hq/lockstep/api"
)

// The --json shapes of the commands that print repositories, refs,
// commits, forks and workspaces. They are fewer fields than the API's
// (api.Repo, api.Ref, …): the CLI printed these since before package
// api, and scripts read them, so they stay as they were.

type repoView struct {
	Name          string `json:"name"`
	Network       string `json:"network"`
	ForkOf        string `json:"fork_of,omitempty"`
	DefaultBranch string `json:"default_branch"`
	Status        string `json:"status"`
	Owner         string `json:"owner,omitempty"`
	BaseCommit    string `json:"base_commit,omitempty"`
	Head          string `json:"head,omitempty"`
	CreatedAt     string `json:"created_at"`
}

func viewRepo(r *api.Repo, head string) repoView {
	return repoView{Name: r.Name, Network: r.Network, ForkOf: r.ForkOf, DefaultBranch: r.DefaultBranch, Status: r.Status,
		Owner: r.Owner, BaseCommit: r.BaseCommit, Head: head, CreatedAt: jsonTime(r.CreatedAt)}
}

// jsonTime is a time as encoding/json writes it (RFC 3339 with
// nanoseconds), the text the server sent.
func jsonTime(t time.Time) string {
	b, _ := t.MarshalJSON()
	if len(b) >= 2 {
		return string(b[1 : len(b)-1])
	}
	return ""
}

type refView struct {
	Name string `json:"name"`
	OID  string `json:"oid"`
}

type commitView struct {
	Commit  string   `json:"commit"`
	Tree    string   `json:"tree"`
	Parents []string `json:"parents"`
	Message string   `json:"message"`
	Author  struct {
		Name  string `json:"name"`
		Email string `json:"email"`
		Time  string `json:"time"`
	} `json:"author"`
	Time string `json:"time"`
}

func viewCommit(c api.Commit) commitView {
	v := commitView{Commit: c.Commit, Tree: c.Tree, Parents: c.Parents, Message: c.Message, Time: c.Time}
	v.Author.Name, v.Author.Email, v.Author.Time = c.Author.Name, c.Author.Email, c.Author.Time
	return v
}

type forkView struct {
	Name       string  `json:"name"`
	ForkOf     string  `json:"fork_of"`
	BaseCommit string  `json:"base_commit"`
	Owner      string  `json:"owner"`
	Task       string  `json:"task,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

type workspaceView struct {
	Name       string `json:"name"`
	Owner      string `json:"owner"`
	Status     string `json:"status"`
	Task       string `json:"task,omitempty"`
	Tip        string `json:"tip"`
	BaseCommit string `json:"base_commit"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
}
