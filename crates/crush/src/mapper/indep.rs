//! `crush_choose_indep`: breadth-first, positionally stable choice where a
//! failed slot stays a hole (`CRUSH_ITEM_NONE`), as erasure-coded pools need.

use super::{Mapper, Request};
use crate::bucket::BucketAlg;
use crate::map::{CRUSH_ITEM_NONE, CRUSH_ITEM_UNDEF};

impl Mapper<'_> {
    /// Fills `out[outpos..outpos + left]` with items of `request.type_id`
    /// below bucket `bucket_id` (and `out2` with their leaves if asked).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn choose_indep(
        &mut self,
        bucket_id: i32,
        request: &Request,
        out: &mut [i32],
        outpos: usize,
        left: usize,
        tries: u32,
        recurse_tries: u32,
        mut out2: Option<&mut [i32]>,
        parent_r: i32,
    ) {
        let endpos = outpos + left;
        let mut left = left;
        out[outpos..endpos].fill(CRUSH_ITEM_UNDEF);
        if let Some(out2) = out2.as_deref_mut() {
            out2[outpos..endpos].fill(CRUSH_ITEM_UNDEF);
        }
        let mut ftotal: u32 = 0;
        while left > 0 && ftotal < tries {
            for rep in outpos..endpos {
                if out[rep] != CRUSH_ITEM_UNDEF {
                    continue;
                }
                let slot = Slot {
                    rep,
                    outpos,
                    endpos,
                    ftotal,
                    parent_r,
                    recurse_tries,
                };
                if self.indep_slot(bucket_id, request, out, &mut out2, &slot) {
                    left -= 1;
                }
            }
            ftotal += 1;
        }
        for rep in outpos..endpos {
            if out[rep] == CRUSH_ITEM_UNDEF {
                out[rep] = CRUSH_ITEM_NONE;
            }
            if let Some(out2) = out2.as_deref_mut() {
                if out2[rep] == CRUSH_ITEM_UNDEF {
                    out2[rep] = CRUSH_ITEM_NONE;
                }
            }
        }
    }

    /// One descent for slot `slot.rep`; returns whether the slot got settled
    /// (an item, or a permanent hole), which uses up one of `left`.
    fn indep_slot(
        &mut self,
        bucket_id: i32,
        request: &Request,
        out: &mut [i32],
        out2: &mut Option<&mut [i32]>,
        slot: &Slot,
    ) -> bool {
        let map = self.map;
        let rep = slot.rep;
        let numrep = request.numrep as u32;
        let mut in_id = bucket_id;
        loop {
            let bucket = self.bucket_at(in_id);
            let size = bucket.items.len() as u32;
            // Note: the choice depends on the position even in the nested
            // call, so a bucket chosen for another position draws another item.
            let mut r = (rep as i32).wrapping_add(slot.parent_r) as u32;
            // `is_multiple_of` would need Rust 1.87; the workspace supports 1.80.
            #[allow(clippy::manual_is_multiple_of)]
            let uniform_multiple = bucket.alg == BucketAlg::Uniform && size % numrep == 0;
            if uniform_multiple {
                r = r.wrapping_add(numrep.wrapping_add(1).wrapping_mul(slot.ftotal));
            } else {
                r = r.wrapping_add(numrep.wrapping_mul(slot.ftotal));
            }
            let r = r as i32;
            if size == 0 {
                return false;
            }
            let item = self.bucket_choose(bucket, request.x, r, slot.outpos);
            let item_type = if item < map.max_devices {
                self.item_type_checked(item)
            } else {
                None
            };
            let Some(item_type) = item_type else {
                Self::settle_none(out, out2, rep);
                return true;
            };
            if item_type != request.type_id {
                if item >= 0 {
                    Self::settle_none(out, out2, rep);
                    return true;
                }
                in_id = item;
                continue;
            }
            if out[slot.outpos..slot.endpos].contains(&item) {
                return false;
            }
            if request.recurse_to_leaf {
                let Some(out2) = out2.as_deref_mut() else {
                    unreachable!("chooseleaf always passes a leaf vector");
                };
                if !self.indep_leaf(item, request, out2, slot, r) {
                    return false; // placed nothing; no leaf
                }
            }
            if item_type == 0 && self.is_out(item, request.x) {
                return false;
            }
            out[rep] = item;
            return true;
        }
    }

    /// chooseleaf: finds a device below `item` for slot `slot.rep` of
    /// `out2` (or takes `item` itself if it is a device).
    fn indep_leaf(
        &mut self,
        item: i32,
        request: &Request,
        out2: &mut [i32],
        slot: &Slot,
        r: i32,
    ) -> bool {
        if item >= 0 {
            out2[slot.rep] = item;
            return true;
        }
        let leaf_request = Request {
            x: request.x,
            numrep: request.numrep,
            type_id: 0,
            recurse_to_leaf: false,
        };
        let tries = slot.recurse_tries;
        self.choose_indep(item, &leaf_request, out2, slot.rep, 1, tries, 0, None, r);
        out2[slot.rep] != CRUSH_ITEM_NONE
    }

    /// The type of `item`, or `None` for a bucket id the map lacks.
    fn item_type_checked(&self, item: i32) -> Option<i32> {
        if item >= 0 {
            Some(0)
        } else {
            self.map.bucket(item).map(|bucket| bucket.type_id)
        }
    }

    fn settle_none(out: &mut [i32], out2: &mut Option<&mut [i32]>, rep: usize) {
        out[rep] = CRUSH_ITEM_NONE;
        if let Some(out2) = out2.as_deref_mut() {
            out2[rep] = CRUSH_ITEM_NONE;
        }
    }
}

/// Where one indep slot sits and what it may spend.
struct Slot {
    rep: usize,
    outpos: usize,
    endpos: usize,
    ftotal: u32,
    parent_r: i32,
    recurse_tries: u32,
}
