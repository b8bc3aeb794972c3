package monitor

// SetEnv replaces the commands' environment for a test and returns a
// function that restores it.
func SetEnv(e Env) (restore func()) {
	old := env
	env = e
	return func() { env = old }
}
