package run

// BoxGateway is where a box finds the gateway, inside its own network
// namespace: the gateway listens there for the run (and answers with
// runs/<run-id>/gateway.json, see WriteReady), and the supervisor points
// the box's proxy variables at it.
const BoxGateway = "127.0.0.1:7300"
