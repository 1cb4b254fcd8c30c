//! Where a schema's records go: one file slot, or the destinations the Python router named
//! for the values of the dataset and table fields, learned as the kernel hands them back
//! ("route_unknown") and the Python path routes them.

// FxHash: see stage.rs (a few bytes hashed per message).
use rustc_hash::FxHashMap as HashMap;

/// Learned routes kept per schema (values of garbage fields must not grow memory unbounded).
const MAX_LEARNED_ROUTES: usize = 10_000;

pub enum Route {
    /// Every record of the schema goes to one file slot (static or schema-name routing).
    Constant(usize),
    /// The dataset and table fields name the destination; destinations the Python router
    /// accepted are learned as (dataset bytes, 0xFF, table bytes) → file slot.
    Fields(HashMap<Vec<u8>, usize>),
}

impl Route {
    /// Remember that the Python router sent (`dataset`, `table`) to file slot `slot` (field
    /// routing; a constant route has nothing to learn). At most [`MAX_LEARNED_ROUTES`].
    pub fn learn(&mut self, dataset: &[u8], table: &[u8], slot: usize) {
        if let Route::Fields(learned) = self {
            if learned.len() < MAX_LEARNED_ROUTES {
                learned.insert(route_key(dataset, table), slot);
            }
        }
    }
}

fn route_key(dataset: &[u8], table: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(dataset.len() + table.len() + 1);
    key.extend_from_slice(dataset);
    key.push(0xFF);
    key.extend_from_slice(table);
    key
}
