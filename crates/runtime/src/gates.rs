//! `--feature-gates`, as Flux parses it: `Name=bool,Name=bool`. Each controller declares the
//! gates it knows, with Flux's names, so a Flux Deployment's arguments start it unchanged:
//! those it acts on, and those that only tune Flux's own machinery (caches, pollers), which
//! it accepts and reports as having no effect.

/// One gate a controller accepts; `T` is the controller's set of gates.
pub struct Gate<T> {
    /// Flux's name of the gate.
    pub name: &'static str,
    pub effect: Effect<T>,
}

/// What setting a gate does.
pub enum Effect<T> {
    /// Turns a switch of the controller on or off.
    Sets(fn(&mut T, bool)),
    /// Nothing here: set to another value than Flux's default, it is reported with why.
    Nothing { default: bool, why: &'static str },
}

/// Gates set to a non-default value that change nothing in the controller, with why.
pub type WithoutEffect = Vec<(&'static str, &'static str)>;

/// Parses `text` over `T::default()` (the controller's defaults, Flux's); an unknown gate or
/// a value that is not a boolean is an error naming it. Also returns the gates set to a
/// non-default value that change nothing in this controller, with why.
pub fn parse<T: Default>(gates: &[Gate<T>], text: &str) -> Result<(T, WithoutEffect), String> {
    let mut set = T::default();
    let mut without_effect = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, value) = entry
            .split_once('=')
            .ok_or_else(|| format!("missing bool value for feature gate {entry}"))?;
        let (name, value) = (name.trim(), value.trim());
        let enabled = parse_bool(value)
            .ok_or_else(|| format!("invalid value of {name}={value}, err: not a boolean"))?;
        let gate = gates
            .iter()
            .find(|gate| gate.name == name)
            .ok_or_else(|| format!("unrecognized feature gate: {name}"))?;
        match gate.effect {
            Effect::Sets(apply) => apply(&mut set, enabled),
            Effect::Nothing { default, why } => {
                if enabled != default {
                    without_effect.push((gate.name, why));
                }
            }
        }
    }
    Ok((set, without_effect))
}

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq)]
    struct Switches {
        on: bool,
    }

    const GATES: &[Gate<Switches>] = &[
        Gate {
            name: "On",
            effect: Effect::Sets(|switches, on| switches.on = on),
        },
        Gate {
            name: "Cache",
            effect: Effect::Nothing {
                default: true,
                why: "nothing is cached",
            },
        },
    ];

    #[test]
    fn gates_set_switches_and_those_without_effect_are_named_when_changed() {
        assert_eq!(parse(GATES, "").unwrap(), (Switches::default(), Vec::new()));
        let (switches, without_effect) = parse(GATES, " On=True,Cache=true").unwrap();
        assert_eq!((switches.on, without_effect), (true, Vec::new()));
        let (_, without_effect) = parse(GATES, "Cache=0").unwrap();
        assert_eq!(without_effect, [("Cache", "nothing is cached")]);
        assert_eq!(
            parse(GATES, "Off=true").unwrap_err(),
            "unrecognized feature gate: Off"
        );
    }
}
