//! The configuration space: every combination of the tile parameters' values and the dtype
//! parameters' choices, in a fixed order (the first parameter varies slowest).

use tilus_core::DType;

/// One parameter of the space, in the order of the function's generics.
#[derive(Clone, Debug)]
pub enum Param {
    /// `const BM: i32` with its candidate values.
    Tile { name: String, values: Vec<i32> },
    /// `W: DTypeParam` with its candidate dtypes (and their names as written).
    DType {
        name: String,
        values: Vec<(DType, String)>,
    },
}

impl Param {
    pub fn name(&self) -> &str {
        match self {
            Param::Tile { name, .. } | Param::DType { name, .. } => name,
        }
    }
    fn len(&self) -> usize {
        match self {
            Param::Tile { values, .. } => values.len(),
            Param::DType { values, .. } => values.len(),
        }
    }
    fn value_text(&self, i: usize) -> String {
        match self {
            Param::Tile { values, .. } => values[i].to_string(),
            Param::DType { values, .. } => values[i].1.clone(),
        }
    }
}

/// A point of the space: for each parameter, the index of its chosen value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point(pub Vec<usize>);

#[derive(Clone, Debug, Default)]
pub struct Space {
    pub params: Vec<Param>,
    pub points: Vec<Point>,
}

impl Space {
    /// Enumerate the cartesian product of `params`.
    pub fn new(params: Vec<Param>) -> Space {
        let mut points = vec![Point(Vec::new())];
        for p in &params {
            let mut next = Vec::with_capacity(points.len() * p.len());
            for point in &points {
                for v in 0..p.len() {
                    let mut q = point.0.clone();
                    q.push(v);
                    next.push(Point(q));
                }
            }
            points = next;
        }
        Space { params, points }
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Value of tile parameter `name` at `point`.
    pub fn tile(&self, point: &Point, name: &str) -> Option<i32> {
        self.params
            .iter()
            .zip(&point.0)
            .find_map(|(p, &i)| match p {
                Param::Tile { name: n, values } if n == name => Some(values[i]),
                _ => None,
            })
    }

    /// Choice of dtype parameter `name` at `point`.
    pub fn dtype(&self, point: &Point, name: &str) -> Option<DType> {
        self.params
            .iter()
            .zip(&point.0)
            .find_map(|(p, &i)| match p {
                Param::DType { name: n, values } if n == name => Some(values[i].0),
                _ => None,
            })
    }

    /// `BM=32,BN=64,W=i6`.
    pub fn describe(&self, point: &Point) -> String {
        self.params
            .iter()
            .zip(&point.0)
            .map(|(p, &i)| format!("{}={}", p.name(), p.value_text(i)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Which configurations a diagnostic occurs in, for its message; `None` when it occurs in
    /// every configuration (nothing to say: a message without a note means "everywhere").
    pub fn describe_subset(&self, configs: &[usize]) -> Option<String> {
        let total = self.points.len();
        if total <= 1 || configs.is_empty() {
            return None;
        }
        if configs.len() >= total {
            return None;
        }
        if configs.len() == 1 {
            return Some(format!(
                "in configuration {}",
                self.describe(&self.points[configs[0]])
            ));
        }
        // One or two parameter values that select exactly these configurations?
        let n = self.params.len();
        let selects = |fixed: &[(usize, usize)]| {
            let matching: Vec<usize> = (0..total)
                .filter(|&c| fixed.iter().all(|&(p, v)| self.points[c].0[p] == v))
                .collect();
            matching == configs
        };
        let first = &self.points[configs[0]].0;
        for (p, &v) in first.iter().enumerate() {
            if selects(&[(p, v)]) {
                return Some(format!(
                    "in the {} configurations with {}={}",
                    configs.len(),
                    self.params[p].name(),
                    self.params[p].value_text(v)
                ));
            }
        }
        for p in 0..n {
            for q in p + 1..n {
                if selects(&[(p, first[p]), (q, first[q])]) {
                    return Some(format!(
                        "in the {} configurations with {}={}, {}={}",
                        configs.len(),
                        self.params[p].name(),
                        self.params[p].value_text(first[p]),
                        self.params[q].name(),
                        self.params[q].value_text(first[q])
                    ));
                }
            }
        }
        let shown: Vec<String> = configs
            .iter()
            .take(2)
            .map(|&c| self.describe(&self.points[c]))
            .collect();
        Some(match configs.len() {
            2 => format!("in configurations {} and {}", shown[0], shown[1]),
            k => format!(
                "in configurations {} and {} more",
                shown[..1].join(""),
                k - 1
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Space {
        Space::new(vec![
            Param::Tile {
                name: "BM".into(),
                values: vec![16, 32],
            },
            Param::Tile {
                name: "BN".into(),
                values: vec![64, 128],
            },
            Param::Tile {
                name: "BK".into(),
                values: vec![32, 64],
            },
        ])
    }

    #[test]
    fn enumerates_in_order() {
        let s = space();
        assert_eq!(s.len(), 8);
        assert_eq!(s.describe(&s.points[0]), "BM=16,BN=64,BK=32");
        assert_eq!(s.describe(&s.points[1]), "BM=16,BN=64,BK=64");
        assert_eq!(s.describe(&s.points[7]), "BM=32,BN=128,BK=64");
    }

    #[test]
    fn describes_subsets() {
        let s = space();
        assert_eq!(s.describe_subset(&[0, 1, 2, 3, 4, 5, 6, 7]), None);
        assert_eq!(
            s.describe_subset(&[3]).unwrap(),
            "in configuration BM=16,BN=128,BK=64"
        );
        assert_eq!(
            s.describe_subset(&[4, 5, 6, 7]).unwrap(),
            "in the 4 configurations with BM=32"
        );
        assert_eq!(
            s.describe_subset(&[6, 7]).unwrap(),
            "in the 2 configurations with BM=32, BN=128"
        );
        assert_eq!(
            s.describe_subset(&[0, 3]).unwrap(),
            "in configurations BM=16,BN=64,BK=32 and BM=16,BN=128,BK=64"
        );
        assert_eq!(
            s.describe_subset(&[0, 3, 5]).unwrap(),
            "in configurations BM=16,BN=64,BK=32 and 2 more"
        );
    }
}
