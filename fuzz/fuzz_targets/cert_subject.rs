//! A client certificate as the TLS layer hands it over: its subject read as an RFC 2253
//! name (the client's principal) and rewritten by ssl.principal.mapping.rules. The first
//! byte picks a rule set. Nothing may panic, and every name read must be printable text
//! that a rule can match.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runnel_security::principal::{subject_name, PrincipalRules};

const RULES: [&str; 3] = ["DEFAULT", r"RULE:^CN=([^,]*),.*$/$1/L,DEFAULT", r"RULE:^(.*)$/x-$1/U"];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, der)) = data.split_first() else { return };
    let Ok(name) = subject_name(der) else { return };
    let rules = PrincipalRules::parse(RULES[mode as usize % RULES.len()]).expect("valid rules");
    if let Some(mapped) = rules.apply(&name) {
        assert!(mode as usize % RULES.len() != 0 || mapped == name);
    }
});
