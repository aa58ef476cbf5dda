// The module the SDK's native unit tests run in (./test.sh). Its path is the one every Go guest
// module has (wit-bindgen's Go generator imports its bindings by it), so the SDK's packages keep
// their import paths when guests/lib.sh copies them into a guest: `wit_component/reconciler`.
// Only the *_wasip1.go files need the generated bindings and go.bytecodealliance.org/pkg, and
// they are left out of a native build, so this module requires nothing.
module wit_component

go 1.25
