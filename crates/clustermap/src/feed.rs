//! How a subscriber advances its map from what the monitor sends: a full map, a run of
//! incrementals, or both (a full map and the incrementals that follow it), as in Ceph's
//! `MOSDMap`. The client, the OSD daemon and the simulator's nodes all use
//! [`advance`], so they apply incrementals the same way: strictly in epoch order, never
//! across a gap, and never past a checksum mismatch.
//!
//! ```
//! use carmine_clustermap::{advance, OsdMap, OsdMapIncremental};
//! use carmine_types::{Epoch, OsdId};
//! use std::sync::Arc;
//!
//! let e1 = Arc::new(OsdMap::new_dev(3));
//! let mut e2 = (*e1).clone();
//! e2.epoch = Epoch(2);
//! e2.set_config("k", Some("v")).unwrap();
//! let inc = Arc::new(OsdMapIncremental::between(&e1, &e2));
//! let step = advance(Some(&e1), None, &[inc]);
//! assert_eq!(step.maps.len(), 1);
//! assert_eq!(*step.maps[0], e2);
//! assert_eq!(step.request, None);
//! ```

use crate::incremental::{ApplyError, OsdMapIncremental};
use crate::osdmap::OsdMap;
use carmine_types::Epoch;
use std::sync::Arc;

/// What a map message did for a subscriber.
#[derive(Debug, Clone, PartialEq)]
pub struct MapAdvance {
    /// The maps newer than the one held, oldest first; the last is the newest. A
    /// consumer acts on each in turn (a PG must see every interval change it can).
    pub maps: Vec<Arc<OsdMap>>,
    /// Set when part of the message could not be applied: ask the monitor for the maps
    /// after this epoch (`MonGetMap { have }`). `Epoch(0)` asks for a full map, after a
    /// checksum mismatch or another sign that the map held diverged.
    pub request: Option<Epoch>,
    /// Why the request is needed, for the consumer's log.
    pub error: Option<AdvanceError>,
}

/// Why a subscriber could not apply all of a map message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdvanceError {
    #[error("incremental to {incremental} does not follow {held}: epochs are missing")]
    Gap { held: Epoch, incremental: Epoch },
    #[error("incremental to {incremental} arrived before any full map")]
    NoBase { incremental: Epoch },
    #[error("incremental to {epoch} did not apply: {source}")]
    Apply { epoch: Epoch, source: ApplyError },
}

/// Advances from `held` (the subscriber's newest map, if any) through `full` (taken
/// when newer than `held`) and then `incrementals` (each applied when it is exactly the
/// next epoch; older ones are skipped as already seen). Stops at the first gap or
/// failed apply and says what to ask the monitor for.
pub fn advance(
    held: Option<&Arc<OsdMap>>,
    full: Option<&Arc<OsdMap>>,
    incrementals: &[Arc<OsdMapIncremental>],
) -> MapAdvance {
    let mut step = MapAdvance {
        maps: Vec::new(),
        request: None,
        error: None,
    };
    let mut current = held.cloned();
    if let Some(full) = full {
        if current.as_ref().is_none_or(|c| c.epoch < full.epoch) {
            step.maps.push(full.clone());
            current = Some(full.clone());
        }
    }
    for inc in incrementals {
        let Some(base) = current.as_ref() else {
            step.request = Some(Epoch(0));
            step.error = Some(AdvanceError::NoBase {
                incremental: inc.epoch,
            });
            break;
        };
        if inc.epoch <= base.epoch {
            continue;
        }
        if inc.epoch.0 != base.epoch.0 + 1 {
            step.request = Some(base.epoch);
            step.error = Some(AdvanceError::Gap {
                held: base.epoch,
                incremental: inc.epoch,
            });
            break;
        }
        match base.apply(inc) {
            Ok(next) => {
                let next = Arc::new(next);
                step.maps.push(next.clone());
                current = Some(next);
            }
            Err(source) => {
                // The map held is not the monitor's: only a full map repairs it.
                step.request = Some(Epoch(0));
                step.error = Some(AdvanceError::Apply {
                    epoch: inc.epoch,
                    source,
                });
                break;
            }
        }
    }
    step
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WEIGHT_IN;
    use carmine_types::OsdId;

    /// Epochs 1..=count, each setting one config key.
    fn chain(count: u32) -> (Vec<Arc<OsdMap>>, Vec<Arc<OsdMapIncremental>>) {
        let mut maps = vec![Arc::new(OsdMap::new_dev(3))];
        let mut incs = Vec::new();
        for index in 1..count {
            let prev = maps.last().unwrap().clone();
            let mut next = (*prev).clone();
            next.epoch = prev.epoch.next();
            next.set_config(&format!("k{index}"), Some("v")).unwrap();
            incs.push(Arc::new(OsdMapIncremental::between(&prev, &next)));
            maps.push(Arc::new(next));
        }
        (maps, incs)
    }

    #[test]
    fn a_run_of_incrementals_yields_every_epoch_in_order() {
        let (maps, incs) = chain(5);
        let step = advance(Some(&maps[0]), None, &incs);
        assert_eq!(step.maps, maps[1..].to_vec());
        assert_eq!(step.request, None);
        // Already-seen epochs are skipped, not re-applied.
        let step = advance(Some(&maps[2]), None, &incs);
        assert_eq!(step.maps, maps[3..].to_vec());
        assert_eq!(step.request, None);
        let step = advance(Some(&maps[4]), None, &incs);
        assert!(step.maps.is_empty());
    }

    #[test]
    fn a_gap_stops_and_asks_from_the_epoch_held() {
        let (maps, incs) = chain(6);
        let step = advance(Some(&maps[0]), None, &incs[2..]);
        assert!(step.maps.is_empty());
        assert_eq!(step.request, Some(maps[0].epoch));
        assert!(matches!(step.error, Some(AdvanceError::Gap { .. })));
        // Applies up to the gap, then asks from there.
        let mut holes = incs.clone();
        holes.remove(2);
        let step = advance(Some(&maps[0]), None, &holes);
        assert_eq!(step.maps, maps[1..3].to_vec());
        assert_eq!(step.request, Some(maps[2].epoch));
    }

    #[test]
    fn a_checksum_mismatch_asks_for_a_full_map_and_applies_nothing() {
        let (maps, incs) = chain(3);
        let mut diverged = (*maps[0]).clone();
        diverged.osds.insert(
            OsdId(9),
            crate::OsdInfo {
                id: OsdId(9),
                up: false,
                weight: WEIGHT_IN,
                shard_addrs: Vec::new(),
                up_from: Epoch(0),
                down_at: Epoch(0),
                up_thru: Epoch(0),
                host: "stray".into(),
                primary_affinity: crate::OsdInfo::PRIMARY_AFFINITY_DEFAULT,
                instance: 0,
                fullness: crate::Fullness::None,
                lost_at: carmine_types::Epoch(0),
            },
        );
        let step = advance(Some(&Arc::new(diverged)), None, &incs);
        assert!(step.maps.is_empty());
        assert_eq!(step.request, Some(Epoch(0)));
        assert!(matches!(
            step.error,
            Some(AdvanceError::Apply {
                source: ApplyError::Checksum { .. },
                ..
            })
        ));
    }

    #[test]
    fn a_full_map_then_incrementals_and_none_without_a_base() {
        let (maps, incs) = chain(4);
        let step = advance(None, Some(&maps[1]), &incs[1..]);
        assert_eq!(step.maps, maps[1..].to_vec());
        // An older full map is ignored; the incrementals still apply.
        let step = advance(Some(&maps[2]), Some(&maps[1]), &incs);
        assert_eq!(step.maps, maps[3..].to_vec());
        let step = advance(None, None, &incs);
        assert!(step.maps.is_empty());
        assert_eq!(step.request, Some(Epoch(0)));
    }
}
