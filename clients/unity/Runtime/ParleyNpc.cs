// ParleyNpc.cs: the MonoBehaviour a Unity scene puts on an NPC. It holds one ParleyConversation (the
// session on `parley serve`) and forwards its API: await Say(line, onToken, onSpeak), Cancel(), the State
// and StateChanged, Tag, AnswerTool, and SaveHistory/LoadHistory for the game's save system.

#if UNITY_5_3_OR_NEWER
using System;
using System.Threading.Tasks;
using UnityEngine;

namespace Parley
{
    /// <summary>Which HTTP the NPC's client uses. Automatic: UnityWebRequest in a WebGL player (which has no
    /// HttpClient), HttpClient everywhere else.</summary>
    public enum ParleyTransportChoice { Automatic, HttpClient, UnityWebRequest }

    [DisallowMultipleComponent]
    public sealed class ParleyNpc : MonoBehaviour, IParleySaveable
    {
        [Tooltip("The address `parley serve` printed.")]
        public string serverUrl = "http://127.0.0.1:8765";
        [Tooltip("The server's token (PARLEY_SERVE_TOKEN), when it has one.")]
        public string token = "";
        [Tooltip("The asset the NPC runs: a path under one of the server's --assets folders.")]
        public string asset = "tool_calling.json";
        [Tooltip("The session's id: keep it the same across save games (empty: the server names one).")]
        public string sessionId = "";
        public ParleyTransportChoice transport = ParleyTransportChoice.Automatic;
        [Tooltip("Connect in Start (else on the first Say, or Connect()).")]
        public bool connectOnStart = true;

        ParleyConversation conversation;

        /// <summary>The conversation (made on first use from the fields above).</summary>
        public ParleyConversation Conversation
        {
            get
            {
                if (conversation == null)
                {
                    conversation = new ParleyConversation(new ParleyClient(serverUrl, token, Transport(transport)), asset,
                                                          sessionId, true);
                    conversation.StateChanged += state => { if (StateChanged != null) StateChanged(state); };
                    conversation.Tag += (name, value) => { if (Tag != null) Tag(name, value); };
                }
                return conversation;
            }
        }

        public ParleyState State { get { return conversation == null ? ParleyState.Disconnected : conversation.State; } }
        public event Action<ParleyState> StateChanged;
        /// <summary>A reply tag the asset asks for (reply_tags): slot name and value, e.g. "mood", "angry".</summary>
        public event Action<string, string> Tag;

        public string SaveKey { get { return string.IsNullOrEmpty(sessionId) ? name : sessionId; } }

        /// <summary>The transport for a choice: UnityWebRequest's needs the player loop (play mode, main thread).</summary>
        public static IParleyTransport Transport(ParleyTransportChoice choice)
        {
#if UNITY_WEBGL && !UNITY_EDITOR
            if (choice == ParleyTransportChoice.HttpClient)
                Debug.LogWarning("Parley: a WebGL player has no HttpClient; using UnityWebRequest");
            return new UnityWebRequestTransport();
#else
            if (choice == ParleyTransportChoice.UnityWebRequest) return new UnityWebRequestTransport();
            return new HttpClientTransport();
#endif
        }

        async void Start()
        {
            if (!connectOnStart || conversation != null && conversation.State != ParleyState.Disconnected) return;
            try
            {
                await Connect();
            }
            catch (ParleyException e)
            {
                Debug.LogWarning("Parley: " + name + " could not connect to " + serverUrl + ": " + e.Message);
            }
        }

        public Task<SessionInfo> Connect() { return Conversation.Connect(); }

        /// <summary>See ParleyConversation.Say: onToken gets only the reply's text, as it streams.</summary>
        public Task<TurnResult> Say(string line, Action<string> onToken = null, Action<string> onSpeak = null,
                                    Action<string, string> onTag = null)
        {
            return Conversation.Say(line, onToken, onSpeak, onTag);
        }

        public void Cancel() { if (conversation != null) conversation.Cancel(); }

        public void AnswerTool(string tool, Func<ToolRequest, string> answer) { Conversation.AnswerTool(tool, answer); }

        public void AnswerToolAsync(string tool, Func<ToolRequest, Task<string>> answer)
        {
            Conversation.AnswerToolAsync(tool, answer);
        }

        public Task<string> SaveHistory() { return Conversation.SaveHistory(); }

        public Task LoadHistory(string historyJson) { return Conversation.LoadHistory(historyJson); }

        void OnDestroy()
        {
            if (conversation != null) conversation.Dispose();
        }
    }
}
#endif
