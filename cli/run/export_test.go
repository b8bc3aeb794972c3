package run

// SetEnv replaces the outside world for a test and returns the old one.
func SetEnv(e Env) Env {
	old := env
	env = e
	return old
}

// DefaultEnv is the production environment.
func DefaultEnv() Env { return env }
