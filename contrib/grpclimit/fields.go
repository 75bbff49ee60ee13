package grpclimit

// The response header metadata keys of the rate-limit fields (gRPC
// metadata keys are lowercase): draft-ietf-httpapi-ratelimit-headers-11's
// RateLimit-Policy and RateLimit. Their values are httplimit's, to the byte
// (internal/ratefields formats both).
const (
	policyField = "ratelimit-policy"
	stateField  = "ratelimit"
)
