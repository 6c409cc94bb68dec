package redis

import (
	"time"

	"github.com/tokengate/tokengate/internal/logbudget"
)

// failureLogEvery is the least time between two lines of one kind about
// calls that failed, as in the service's store-failure log: while Redis
// fails, every request could write each of them.
const failureLogEvery = 10 * time.Second

// failureLogs are the budgets of the store's lines about a request's
// calls that failed, one line each per failureLogEvery, the next saying
// how many were dropped.
type failureLogs struct {
	settle *logbudget.Budget // a cross-slot settle (cross.go)
	refund *logbudget.Budget // a refund of a late charge (ambiguous.go)
	load   *logbudget.Budget // loading the function library (calls.go)
}

func newFailureLogs() failureLogs {
	return failureLogs{
		settle: logbudget.New(1, failureLogEvery),
		refund: logbudget.New(1, failureLogEvery),
		load:   logbudget.New(1, failureLogEvery),
	}
}
