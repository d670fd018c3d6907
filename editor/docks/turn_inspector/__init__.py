"""The Turn Inspector dock: why each reply came out as it did."""
