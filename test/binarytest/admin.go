package binarytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// AdminAddress is kproxy's admin API when the test gives it its own node:
// on the node's own loopback.
const AdminAddress = "127.0.0.1:10260"

// AdminRequest is a request to the admin API at addr with the bearer token
// read from tokenFile (kproxy writes it there once it serves).
func AdminRequest(method, addr, path, tokenFile string, body io.Reader) (*http.Request, error) {
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	return req, nil
}

// State asks the admin API at addr, over client, for GET /state's service
// ports, deleted ones included; SP is the caller's view of one (the JSON
// fields it needs).
func State[SP any](client *http.Client, addr, tokenFile string) ([]SP, error) {
	req, err := AdminRequest("GET", addr, "/state", tokenFile, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET /state: %s: %s", resp.Status, body)
	}
	var doc struct {
		State struct {
			ServicePorts []SP `json:"servicePorts"`
		} `json:"state"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("GET /state: %w: %s", err, body)
	}
	return doc.State.ServicePorts, nil
}
