"""The site's pages, one module per area: `pages` (home, project), `projects` (create, configure, members),
`review` (the item workspace), `transfer` (import and export). `display` turns stored JSON into what the
templates print; `access` holds the permission checks every view starts with."""
