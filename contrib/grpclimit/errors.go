package grpclimit

import (
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slidelog/slidelog"
)

// statusError is a gRPC status that keeps the error it stands for. gRPC
// sends the status (status.FromError finds it through GRPCStatus), and in
// the process errors.Is and errors.As still see the cause: an outer
// interceptor finds slidelog.ErrWrongType, a client's caller
// slidelog.ErrWaitDeadline or context.DeadlineExceeded.
type statusError struct {
	st    *status.Status
	cause error
}

func (e *statusError) Error() string              { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *status.Status { return e.st }
func (e *statusError) Unwrap() error              { return e.cause }

// deniedError is ResourceExhausted for a call res denied under limit, with
// a google.rpc.RetryInfo detail: retry_delay is RetryAfter, to the
// microsecond (0 for a negative one, which a Decider written outside
// slidelog may return: a client must not be told to retry in the past).
// cause is nil for a server's denial (a denial is data).
func deniedError(limit slidelog.Limit, res slidelog.Result, cause error) error {
	retry := max(res.RetryAfter, 0)
	st := status.New(codes.ResourceExhausted,
		fmt.Sprintf("grpclimit: rate limit of %v reached; retry after %v", limit, retry))
	// WithDetails fails only for codes.OK or a message that does not marshal.
	if withRetry, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = withRetry
	}
	return &statusError{st: st, cause: cause}
}
