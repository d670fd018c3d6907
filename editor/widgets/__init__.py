"""Small widgets and the look the rest of the editor shares."""
