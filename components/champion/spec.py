"""ChampionResolver's component spec: parameter and channel names, spelled once."""

from __future__ import annotations

from tfx.types import component_spec

from imgpipe.components.common.formats.artifact_types import ChampionArtifact

# The serving directory whose newest sound push is the champion; "" for none.
SERVING_DIR_KEY = "serving_dir"
CHAMPION_KEY = "champion"

# Custom properties of the output, for the lineage: the champion's version (NO_VERSION
# when there is none), the serving head, and the status (components/common/formats/champion.py).
VERSION_PROPERTY = "champion_version"
HEAD_PROPERTY = "serving_head"
STATUS_PROPERTY = "status"
NO_VERSION = -1


class ChampionResolverSpec(component_spec.ComponentSpec):
    """No input; the ServedChampion artifact out."""

    PARAMETERS = {
        SERVING_DIR_KEY: component_spec.ExecutionParameter(type=str),
    }
    INPUTS: dict[str, component_spec.ChannelParameter] = {}
    OUTPUTS = {
        CHAMPION_KEY: component_spec.ChannelParameter(type=ChampionArtifact),
    }
