"""The shop's event-sourced aggregates: its shopping carts (:mod:`.carts`)."""
