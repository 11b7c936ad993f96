"""A tiny shop: prices, carts and a daily report."""
