package kvevents_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// go-zeromq's PUB socket (mockworker's publisher, the tests' independent
	// engine side) never stops its writer goroutine.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}
