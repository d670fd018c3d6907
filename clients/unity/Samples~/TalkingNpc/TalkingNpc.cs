// TalkingNpc.cs: a sample NPC for Parley. Put it on a GameObject beside a ParleyNpc whose asset is
// tool_calling.json (the quartermaster, from Parley Studio's examples), start `parley serve --assets
// <the examples folder>`, and press Play: type a line, and the reply streams in as a subtitle (only the
// reply's text, never the tool call's JSON). The NPC's tool call check_stock is answered from the game's
// stores, Stop cancels a turn, and Save/Load keep the conversation in PlayerPrefs like a save game. On an
// NPC whose asset has reply_tags (bard.json), each tag (a mood, a gesture) is logged as it arrives.

using System.Collections.Generic;
using System.Threading.Tasks;
using Parley;
using UnityEngine;

public sealed class TalkingNpc : MonoBehaviour
{
    public string npcName = "Hilde";
    public string playerLine = "Quartermaster, how many arrows?";
    [TextArea] public string subtitle = "";

    // The game's stores: what the check_stock tool answers from.
    readonly Dictionary<string, int> stores = new Dictionary<string, int> { { "arrows", 240 }, { "bolts", 60 } };
    ParleyNpc npc;

    void Awake()
    {
        npc = GetComponent<ParleyNpc>();
        npc.StateChanged += state => Debug.Log("  (" + npcName + " is " + Describe(state) + ")");
        // An asset's reply_tags (bard.json: a mood and a gesture) arrive as the reply is made: play the animation
        npc.Tag += (tag, value) => Debug.Log("  [" + npcName + "'s " + tag + ": " + value + "]");
        npc.AnswerTool("check_stock", CheckStock);
    }

    string CheckStock(ToolRequest call)
    {
        string item = call.Arguments.ContainsKey("item") ? call.Arguments["item"] as string ?? "" : "";
        int count;
        string answer = stores.TryGetValue(item.ToLowerInvariant(), out count) ? count + " " + item + " in the armoury — counted twice"
                                                                               : "no " + item + " in the stores";
        Debug.Log("  [the game answers " + call.Tool + call.ArgumentsJson + ": " + answer + "]");
        return answer;
    }

    /// <summary>Says the player's line; the subtitle fills in as the reply streams.</summary>
    public async Task Talk(string line)
    {
        Debug.Log("Player: " + line);
        subtitle = "";
        try
        {
            // (the TurnResult Say returns also has the reply's tags, in Tags, for a game that reads them at the end)
            await npc.Say(line, onToken: text => subtitle += text);
            Debug.Log(npcName + ": " + subtitle);
        }
        catch (ParleyException e) when (e.Code == "cancelled")
        {
            Debug.Log("  (" + npcName + " stops: the turn was cancelled; \"" + e.Line + "\" can be said again)");
        }
        catch (ParleyException e) when (e.Code == "turn_lost" || e.Code == "server_gone" || e.Code == "unavailable")
        {
            Debug.Log("  (" + npcName + " did not hear: " + e.Code + ")");
            playerLine = e.Line; // offered again
        }
    }

    public void StopTalking() { npc.Cancel(); }

    public async Task Save()
    {
        string history = await npc.SaveHistory();
        PlayerPrefs.SetString("parley." + npc.SaveKey, history);
        PlayerPrefs.Save();
        Debug.Log("  [saved the conversation: " + history.Length + " characters of history]");
    }

    public async Task Load()
    {
        string key = "parley." + npc.SaveKey;
        if (!PlayerPrefs.HasKey(key)) return;
        await npc.LoadHistory(PlayerPrefs.GetString(key));
        var turns = await npc.Conversation.Client.Turns(npc.Conversation.SessionId);
        Debug.Log("  [loaded the save: " + npcName + " remembers " + turns.Count + (turns.Count == 1 ? " turn]" : " turns]"));
    }

    static string Describe(ParleyState state)
    {
        switch (state)
        {
            case ParleyState.Connecting: return "connecting";
            case ParleyState.Idle: return "listening";
            case ParleyState.Thinking: return "thinking";
            case ParleyState.WaitingForGame: return "waiting for the game";
            case ParleyState.Speaking: return "speaking";
            case ParleyState.Failed: return "unreachable";
            default: return "not connected";
        }
    }

    void OnGUI()
    {
        GUILayout.Label(npcName + " (" + Describe(npc.State) + "): " + subtitle);
        GUILayout.BeginHorizontal();
        playerLine = GUILayout.TextField(playerLine);
        if (GUILayout.Button("Say")) Forget(Talk(playerLine));
        if (GUILayout.Button("Stop")) StopTalking();
        if (GUILayout.Button("Save")) Forget(Save());
        if (GUILayout.Button("Load")) Forget(Load());
        GUILayout.EndHorizontal();
    }

    static async void Forget(Task task)
    {
        try
        {
            await task;
        }
        catch (System.Exception e)
        {
            Debug.LogException(e);
        }
    }
}
