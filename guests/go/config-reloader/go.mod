// The module path is the one wit-bindgen's Go generator imports its bindings by; the bindings
// themselves are generated into the build directory by guests/go/build.sh.
module wit_component

go 1.25

require go.bytecodealliance.org/pkg v0.2.3
