// Package policies holds the gateway policy impyard ships, this
// directory's gateway.json, built into the programs so that 'impsup init'
// gives a new yard the very file the repository has. Its test loads it as
// the gateway loads a policy.
package policies

import _ "embed"

// Gateway is policies/gateway.json as shipped.
//
//go:embed gateway.json
var Gateway []byte
