//! Priority bands: JetStream has no per-message priority, so each group's
//! firings are split over three subjects (`chime.fire.<group>.<band>`) and
//! workers drain the highest band first.

use std::fmt;
use std::str::FromStr;

/// A priority band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Band {
    /// Priorities 7–9.
    High,
    /// Priorities 4–6 (the default priority 5 lands here).
    Normal,
    /// Priorities 0–3.
    Low,
}

impl Band {
    /// Highest first: the order in which workers pull.
    pub const ALL: [Band; 3] = [Band::High, Band::Normal, Band::Low];

    /// The band a priority (0–9) belongs to.
    pub fn of_priority(priority: u8) -> Band {
        match priority {
            7.. => Band::High,
            4..=6 => Band::Normal,
            _ => Band::Low,
        }
    }

    /// The band's subject token.
    pub fn as_str(self) -> &'static str {
        match self {
            Band::High => "high",
            Band::Normal => "normal",
            Band::Low => "low",
        }
    }
}

impl fmt::Display for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Band {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Band::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a band (high, normal, low)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_map_to_bands() {
        assert_eq!(Band::of_priority(9), Band::High);
        assert_eq!(Band::of_priority(7), Band::High);
        assert_eq!(Band::of_priority(6), Band::Normal);
        assert_eq!(Band::of_priority(5), Band::Normal);
        assert_eq!(Band::of_priority(4), Band::Normal);
        assert_eq!(Band::of_priority(3), Band::Low);
        assert_eq!(Band::of_priority(0), Band::Low);
    }
}
