"""Comparing what several ranks or nodes see: the one table of what must agree (rules.py), the
comparison engine that applies it (engine.py), the node view of saved or gathered reports
(nodes.py), one report per job under a launcher (jobreport.py), and `fleet`, which runs check on
every node (fleet.py)."""
