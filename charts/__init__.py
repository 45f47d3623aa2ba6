"""One Altair spec per seed figure, built only from warehouse query results."""
