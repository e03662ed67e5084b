//! The kinds of setting values (Kafka's config types) and their checks.

use anyhow::{anyhow, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bool,
    Short,
    Int,
    Long,
    Double,
    Str,
    List,
    /// A Java class name (Kafka's plugins): taken, never loaded.
    Class,
    /// Secret: DescribeConfigs reports it as sensitive, without its value.
    Password,
}

impl Kind {
    /// The DescribeConfigs `config_type` code (KIP-569).
    pub fn code(self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Str => 2,
            Kind::Int => 3,
            Kind::Short => 4,
            Kind::Long => 5,
            Kind::Double => 6,
            Kind::List => 7,
            Kind::Class => 8,
            Kind::Password => 9,
        }
    }
}

/// Checks that `value` parses as the setting's kind.
pub fn check_value(kind: Kind, value: &str) -> Result<()> {
    match kind {
        Kind::Bool => {
            value.parse::<bool>().map_err(|_| anyhow!("expected true or false"))?;
        }
        Kind::Int => {
            value.parse::<i32>().map_err(|_| anyhow!("expected a 32-bit integer"))?;
        }
        Kind::Long => {
            value.parse::<i64>().map_err(|_| anyhow!("expected a 64-bit integer"))?;
        }
        Kind::Double => {
            value.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| anyhow!("expected a number"))?;
        }
        Kind::Short => {
            value.parse::<i16>().map_err(|_| anyhow!("expected a 16-bit integer"))?;
        }
        Kind::Str | Kind::List | Kind::Class | Kind::Password => {}
    }
    Ok(())
}
