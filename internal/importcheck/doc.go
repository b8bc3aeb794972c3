// Package importcheck holds the test of the module's package layers: which
// packages are the public library and which are command code, and the
// direction imports may take between them (README, "Package layout").
//
// The rules, all of them checked on the packages' own files (not their
// tests) and on everything those import, directly or not:
//
//   - the public library (alloc, cuda, trace, replay, gpu, proc, detect
//     and the packages below them) imports no command code (cli, serve,
//     job, policy, python, cmd, internal/cmd); it may use internal helpers
//     such as internal/units;
//   - alloc imports neither replay nor any command code: replay sits
//     above it;
//   - the trace formats (trace/...) import neither alloc nor replay: they
//     are leaves that alloc may import;
//   - proc imports no gpu: process identity is proc's, and gpu uses it;
//   - cuda imports no alloc: alloc/cudadev sits between them.
//
// Besides, programs (package main) live under cmd/ or internal/cmd/ and no
// package or test imports them, and every package of the module belongs to
// one of the layers, so that a new package is placed on purpose.
package importcheck
