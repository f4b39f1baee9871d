"""The page template; a package only so that wheels ship it as package data."""
