//! Test guest: a well-formed component that does not export `reconciler:api/reconciler@0.1.0`,
//! so the host's load-time check must reject it with a message saying so.

wit_bindgen::generate!({
    inline: "
        package test:other;

        world other {
            export run: func() -> string;
        }
    ",
});

struct WrongWorld;

impl Guest for WrongWorld {
    fn run() -> String {
        "I am not a reconciler".to_owned()
    }
}

export!(WrongWorld);
