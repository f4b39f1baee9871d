"""Panel files (<id>.sql + <id>.yaml); a package only so that wheels ship them as package data."""
