//! The principal of a client that logged in with a TLS certificate, as Kafka derives it:
//! the certificate's subject as an RFC 2253 distinguished name (what Java's
//! `X500Principal.getName()` gives, e.g. `CN=alice,OU=eng,O=corp`), rewritten by the first
//! of `ssl.principal.mapping.rules` that matches it (`RULE:pattern/replacement/[LU]`, or
//! `DEFAULT`, the name as it is).

use regex::Regex;

/// The most a certificate's subject is read into: bounds the work a hostile certificate
/// can cause (the TLS layer has already bounded the certificate itself).
const RDNS_MAX: usize = 64;

/// One DER element: its tag, its contents, and the whole element.
struct Tlv<'a> {
    tag: u8,
    body: &'a [u8],
    whole: &'a [u8],
}

/// Reads the element at the start of `input`; returns it and what follows.
fn tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), String> {
    let (&tag, rest) = input.split_first().ok_or("truncated DER element")?;
    if tag & 0x1f == 0x1f {
        return Err("multi-byte DER tags are not used in certificate names".into());
    }
    let (&first, rest) = rest.split_first().ok_or("truncated DER length")?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err("bad DER length".into());
        }
        let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err("DER element longer than its input".into());
    }
    let header = input.len() - rest.len();
    Ok((Tlv { tag, body: &rest[..len], whole: &input[..header + len] }, &rest[len..]))
}

/// The elements of a SEQUENCE or SET body, in order.
fn children(mut body: &[u8]) -> Result<Vec<Tlv<'_>>, String> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let (t, rest) = tlv(body)?;
        out.push(t);
        body = rest;
        if out.len() > RDNS_MAX * 4 {
            return Err("too many elements in a certificate name".into());
        }
    }
    Ok(out)
}

fn expect<'a>(t: Tlv<'a>, tag: u8, what: &str) -> Result<Tlv<'a>, String> {
    match t.tag == tag {
        true => Ok(t),
        false => Err(format!("expected {what} (tag {tag:#x}), found tag {:#x}", t.tag)),
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// The subject of a DER certificate as Java's `X500Principal.getName()` (RFC 2253) writes it.
pub fn subject_name(cert: &[u8]) -> Result<String, String> {
    let (cert, _) = tlv(cert)?;
    let cert = expect(cert, SEQUENCE, "a certificate")?;
    let (tbs, _) = tlv(cert.body)?;
    let tbs = expect(tbs, SEQUENCE, "the certificate body")?;
    let mut fields = children(tbs.body)?.into_iter();
    let mut next = fields.next().ok_or("empty certificate body")?;
    if next.tag == 0xa0 {
        next = fields.next().ok_or("no serial number")?; // [0] version, then the serial
    }
    let _serial = next;
    let _signature = fields.next().ok_or("no signature algorithm")?;
    let _issuer = fields.next().ok_or("no issuer")?;
    let _validity = fields.next().ok_or("no validity")?;
    let subject = expect(fields.next().ok_or("no subject")?, SEQUENCE, "the subject")?;
    let mut rdns = Vec::new();
    for rdn in children(subject.body)? {
        let rdn = expect(rdn, SET, "a relative distinguished name")?;
        let mut parts = Vec::new();
        for atv in children(rdn.body)? {
            let atv = expect(atv, SEQUENCE, "an attribute")?;
            let (oid, rest) = tlv(atv.body)?;
            let oid = expect(oid, OID, "an attribute type")?;
            let (value, _) = tlv(rest)?;
            let oid = dotted(oid.body)?;
            let text = match (keyword(&oid), string_value(&value)) {
                (Some(k), Some(s)) => format!("{k}={}", escape(&s)),
                // As Java: an attribute it has no keyword for, or whose value is not a
                // string, is written as its OID and the hex of its DER encoding.
                (Some(k), None) => format!("{k}=#{}", hex(value.whole)),
                (None, _) => format!("{oid}=#{}", hex(value.whole)),
            };
            parts.push(text);
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn dotted(body: &[u8]) -> Result<String, String> {
    let (&first, rest) = body.split_first().ok_or("empty OID")?;
    let mut out = format!("{}.{}", first / 40, first % 40);
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc.checked_mul(128).ok_or("OID arc too large")? | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            out.push_str(&format!(".{acc}"));
            acc = 0;
        }
    }
    Ok(out)
}

/// The keywords Java's RFC 2253 output uses.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => return None,
    })
}

fn string_value(v: &Tlv<'_>) -> Option<String> {
    match v.tag {
        // UTF8String, PrintableString, T61String, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => std::str::from_utf8(v.body).ok().map(str::to_string),
        // BMPString: UTF-16BE
        0x1e if v.body.len().is_multiple_of(2) => {
            let units: Vec<u16> = v.body.chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253 escaping of an attribute value.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `ssl.principal.mapping.rules`, parsed.
#[derive(Debug, Clone)]
pub struct PrincipalRules(Vec<Rule>);

#[derive(Debug, Clone)]
enum Rule {
    Default,
    Map { pattern: Regex, replacement: String, case: Option<char> },
}

impl PrincipalRules {
    /// Parses the setting: comma-separated `DEFAULT` and `RULE:pattern/replacement/[LU]`
    /// (a `/` inside a pattern or replacement is written `\/`).
    pub fn parse(s: &str) -> Result<PrincipalRules, String> {
        let mut rules = Vec::new();
        let mut rest = s.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                rules.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after).ok_or_else(|| format!("rule {rest}: expected pattern/"))?;
                let (replacement, after) =
                    until_slash(after).ok_or_else(|| format!("rule {rest}: expected replacement/"))?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let pattern = Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("rule pattern: {e}"))?;
                rules.push(Rule::Map { pattern, replacement, case });
                rest = after;
            } else {
                return Err(format!("invalid rule: {rest}"));
            }
            rest = rest.trim_start();
            rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalRules(rules))
    }

    /// The principal name for the distinguished name `dn`: the first rule that matches
    /// decides; None when none does (Kafka then refuses the connection).
    pub fn apply(&self, dn: &str) -> Option<String> {
        self.0.iter().find_map(|r| match r {
            Rule::Default => Some(dn.to_string()),
            Rule::Map { pattern, replacement, case } => {
                let caps = pattern.captures(dn)?;
                let mut out = String::new();
                caps.expand(replacement, &mut out);
                Some(match case {
                    Some('L') => out.to_lowercase(),
                    Some('U') => out.to_uppercase(),
                    _ => out,
                })
            }
        })
    }
}

/// The text before the next unescaped `/` (with `\/` unescaped), and what follows it.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, '/')) => out.push('/'),
                Some((_, other)) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            },
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(subject: &[(&str, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        let mut dn = rcgen::DistinguishedName::new();
        for (k, v) in subject {
            let t = match *k {
                "CN" => rcgen::DnType::CommonName,
                "OU" => rcgen::DnType::OrganizationalUnitName,
                "O" => rcgen::DnType::OrganizationName,
                "C" => rcgen::DnType::CountryName,
                _ => rcgen::DnType::CustomDnType(vec![1, 2, 3, 4]),
            };
            dn.push(t, *v);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().expect("key");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn subjects_read_as_java_writes_them() {
        let der = cert(&[("C", "US"), ("O", "corp"), ("OU", "eng"), ("CN", "alice")]);
        assert_eq!(subject_name(&der).expect("name"), "CN=alice,OU=eng,O=corp,C=US");
        let der = cert(&[("CN", "a,b+c \"q\"")]);
        assert_eq!(subject_name(&der).expect("name"), r#"CN=a\,b\+c \"q\""#);
        let der = cert(&[("X", "v")]);
        let name = subject_name(&der).expect("name");
        assert!(name.starts_with("1.2.3.4=#0c0176"), "{name}");
    }

    #[test]
    fn hostile_der_is_an_error_not_a_panic() {
        let der = cert(&[("CN", "alice")]);
        for cut in 0..der.len() {
            let _ = subject_name(&der[..cut]);
        }
        for i in 0..der.len() {
            let mut bad = der.clone();
            bad[i] ^= 0xff;
            let _ = subject_name(&bad);
        }
        assert!(subject_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    #[test]
    fn mapping_rules_as_kafka_applies_them() {
        let rules = PrincipalRules::parse(
            r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=.*$/${1}@${2}/L, DEFAULT",
        )
        .expect("rules");
        assert_eq!(rules.apply("CN=kafka1,OU=ServiceUsers,O=Org").as_deref(), Some("kafka1"));
        assert_eq!(rules.apply("CN=Duke,OU=JavaSoft,O=Sun").as_deref(), Some("duke@javasoft"));
        assert_eq!(rules.apply("CN=solo").as_deref(), Some("CN=solo"));
        let only = PrincipalRules::parse(r"RULE:^CN=([^,]*).*$/$1/U").expect("rules");
        assert_eq!(only.apply("CN=bob,O=x").as_deref(), Some("BOB"));
        assert_eq!(only.apply("O=x"), None);
        let slash = PrincipalRules::parse(r"RULE:^CN=(.*)$/a\/$1/").expect("rules");
        assert_eq!(slash.apply("CN=b").as_deref(), Some("a/b"));
        assert!(PrincipalRules::parse("RULE:(/x").is_err());
        assert!(PrincipalRules::parse("NOPE").is_err());
        assert_eq!(PrincipalRules::parse("").expect("empty").apply("CN=x").as_deref(), Some("CN=x"));
    }
}
